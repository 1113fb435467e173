/**
 * Writes `packages/loop/run-config.schema.json`, the JSON Schema of a run config file (what editors
 * complete), from the zod schema the loop validates with. A test of @vime/loop fails while the committed
 * file differs: `node --import tsx --conditions=@vime/source scripts/run-config-schema.ts`.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runProcessOk } from '@vime/core/utils';
import { runConfigJsonSchema } from '@vime/loop';

const root = fileURLToPath(new URL('..', import.meta.url));
const path = fileURLToPath(new URL('../packages/loop/run-config.schema.json', import.meta.url));
writeFileSync(path, `${JSON.stringify(runConfigJsonSchema(), null, 2)}\n`);
// In the repository's JSON style, so the lint passes on it as written.
await runProcessOk('pnpm', ['exec', 'biome', 'format', '--write', path], { cwd: root });
console.log(`wrote ${path}`);
