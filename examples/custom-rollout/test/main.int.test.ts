import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const run = promisify(execFile);
const dir = fileURLToPath(new URL('..', import.meta.url));

it('runs the custom rollout end to end and prints one row per question', async () => {
  const { stdout } = await run(
    process.execPath,
    ['--import', 'tsx', '--conditions=@vime/source', 'src/main.ts'],
    {
      cwd: dir,
      timeout: 90_000,
    },
  );
  const rows = stdout.split('\n').filter((l) => /^q\d/.test(l));
  expect(rows).toHaveLength(6);
  for (const row of rows) {
    const [, correct, pass1] = row.split(/\s+/);
    const [c, n] = correct!.split('/').map(Number);
    expect(n).toBe(8);
    expect(Number(pass1)).toBeCloseTo(c! / n!, 3);
  }
  expect(stdout).toMatch(/48 rollouts scored, 0 failed/);
  expect(stdout).toMatch(/stand-in/);
});
