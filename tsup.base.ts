import type { Options } from 'tsup';

/** Shared build settings: ESM for Node 22 with bundled `.d.ts` resolved against sibling packages' builds. */
export function packageBuild(entry: Record<string, string> | string[] = ['src/index.ts']): Options {
  return {
    entry,
    format: ['esm'],
    target: 'node22',
    platform: 'node',
    dts: { compilerOptions: { composite: false, customConditions: [] } },
    clean: true,
    sourcemap: true,
  };
}
