import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.base.js';

// The library entries, then the `vime` bin (with its shebang, no types, built into the same dist).
export default defineConfig([
  { ...packageBuild({ index: 'src/index.ts', testing: 'src/testing.ts' }), clean: false },
  { ...packageBuild({ cli: 'src/cli.ts' }), dts: false, clean: false, banner: { js: '#!/usr/bin/env node' } },
]);
