import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';
import { ATTACK_FILES, INTEGRATION_FILES, TEST_FILES } from './scripts/test-tiers.js';

/**
 * Three tiers, one run (`bash scripts/test.sh [unit|integration|attack]`): unit tests first, fully parallel;
 * then the integration tests on real components; then the attack suites, one file at a time, so no other
 * file's load moves what they provoke (floods that must reach a sandbox limit, fork bombs, signals at
 * every step, a proxy under attack). A file's name says its tier (`scripts/test-tiers.ts`).
 */
export default defineConfig({
  resolve: { conditions: ['@vime/source'] },
  ssr: { resolve: { conditions: ['@vime/source'] } },
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    reporters: ['./scripts/slowest-reporter.ts', 'default'],
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: TEST_FILES,
          exclude: [...configDefaults.exclude, ...INTEGRATION_FILES, ...ATTACK_FILES],
          // every core (vitest's default leaves one idle); unit files use no shared resource
          maxWorkers: availableParallelism(),
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          // the offline task set, built once per source version (unit tests use none)
          globalSetup: ['scripts/test-setup.ts'],
          include: INTEGRATION_FILES,
          exclude: [...configDefaults.exclude, ...ATTACK_FILES],
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: 'attack',
          globalSetup: ['scripts/test-setup.ts'],
          include: ATTACK_FILES,
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
