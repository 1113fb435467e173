import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: { conditions: ['@vime/source'] },
  ssr: { resolve: { conditions: ['@vime/source'] } },
  test: {
    include: [
      'packages/*/src/**/*.test.ts',
      'scripts/**/*.test.ts',
      'examples/*/src/**/*.test.ts',
      'examples/*/test/**/*.test.ts',
    ],
    globalSetup: ['scripts/test-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
