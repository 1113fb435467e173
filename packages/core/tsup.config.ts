import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.base.js';

const base = packageBuild({
  index: 'src/index.ts',
  standin: 'src/standin/index.ts',
  // run by the tokenizer's worker threads (see src/tokenizer/encode-pool.ts); plain JavaScript, no types
  'encode-worker': 'src/tokenizer/encode-worker.mjs',
  // the sharded capture proxy's worker threads (see src/proxy/shards/sharded.ts)
  'shard-worker': 'src/proxy/shards/worker.ts',
});
const dts = typeof base.dts === 'object' ? base.dts : {};

export default defineConfig({
  ...base,
  dts: { ...dts, entry: { index: 'src/index.ts', standin: 'src/standin/index.ts' } },
});
