import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.base.js';

export default defineConfig(
  packageBuild({
    index: 'src/index.ts',
    standin: 'src/standin/index.ts',
    // run by worker threads of the tokenizer (see src/tokenizer/encode-pool.ts)
    'encode-worker': 'src/tokenizer/encode-worker.mjs',
  }),
);
