import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.base.js';

export default defineConfig(
  packageBuild({ index: 'src/index.ts', testing: 'src/testing.ts', kit: 'src/kit.ts', cli: 'src/cli.ts' }),
);
