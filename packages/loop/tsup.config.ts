import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.base.js';

export default defineConfig(
  packageBuild({ index: 'src/index.ts', cli: 'src/cli.ts', 'standin-server': 'src/standin-server.ts' }),
);
