import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.base.js';

export default defineConfig(
  packageBuild({
    index: 'src/index.ts',
    sinks: 'src/sinks/index.ts',
    scrape: 'src/scrape/index.ts',
    testing: 'src/testing.ts',
    cli: 'src/cli.ts',
  }),
);
