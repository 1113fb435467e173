// A source checkout's shard worker: TypeScript, loaded through tsx (the build runs `worker.ts` bundled).
import { register } from 'tsx/esm/api';

register();
await import('./worker.ts');
