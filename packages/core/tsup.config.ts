import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.base.js';

const entries = {
  index: 'src/index.ts',
  utils: 'src/utils/index.ts',
  engine: 'src/engine/index.ts',
  proxy: 'src/proxy/index.ts',
  queue: 'src/queue/index.ts',
  runner: 'src/runner/index.ts',
  standin: 'src/standin/index.ts',
  testing: 'src/testing/index.ts',
};
const base = packageBuild({
  ...entries,
  // run by the tokenizer's worker threads (see src/engine/tokenizer/encode-pool.ts); plain JavaScript, no types
  'encode-worker': 'src/engine/tokenizer/encode-worker.mjs',
  // the sharded capture proxy's worker threads (see src/proxy/shards/sharded.ts)
  'shard-worker': 'src/proxy/shards/worker.ts',
});
const dts = typeof base.dts === 'object' ? base.dts : {};

export default defineConfig({ ...base, dts: { ...dts, entry: entries } });
