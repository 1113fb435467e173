import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Files whose checks need the machine to themselves: latencies under attack (a held event loop against
 * a bound from its own baseline), and process floods, fork bombs and memory hogs that must reach a
 * sandbox limit within a timeout. They run after the rest, one at a time, so no other file's load moves
 * what they measure (beside the suite's heaviest files on 2 cores, a python flood did not reach the pids
 * limit within its 20 s, and a fork-bombed docker sandbox answered nothing).
 */
const TIMED = [
  'packages/core/src/proxy/proxy-hardening.test.ts',
  // floods of a thousand sockets and 30 MB bodies against a proxy process, its memory measured
  'packages/core/src/proxy/attacks/*.test.ts',
  'packages/sandbox/src/hardening.test.ts',
  'packages/sandbox/src/escape.test.ts',
];

export default defineConfig({
  resolve: { conditions: ['@vime/source'] },
  ssr: { resolve: { conditions: ['@vime/source'] } },
  test: {
    globalSetup: ['scripts/test-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: {
          name: 'suite',
          include: [
            'packages/*/src/**/*.test.ts',
            'scripts/**/*.test.ts',
            'examples/*/src/**/*.test.ts',
            'examples/*/test/**/*.test.ts',
          ],
          exclude: [...configDefaults.exclude, ...TIMED],
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'timed', include: TIMED, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
