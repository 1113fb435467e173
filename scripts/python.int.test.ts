/**
 * The project's Python suite, as a Python developer runs it (`cd python && python3 -m pytest`): the policy
 * server, the trainer, and the Python that ships in packages (the slime bridge, the sandboxes' programs),
 * each folder named by `testpaths` in python/pyproject.toml. Run with the Python that has torch.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { torchPythonOrSkip } from '@vime/core/testing';
import { describe, expect, it } from 'vitest';

const pythonDir = fileURLToPath(new URL('../python/', import.meta.url));
// Every suite collected: a folder dropped from `testpaths` (or a test file pytest stops finding) lowers it.
const AT_LEAST = 188;

describe('the project’s Python (python/pyproject.toml)', () => {
  const python = torchPythonOrSkip();
  if (!python) return;

  it(`passes its pytest suite, at least ${AT_LEAST} tests, none skipped`, { timeout: 900_000 }, () => {
    const result = spawnSync(python, ['-m', 'pytest', '-q'], {
      cwd: pythonDir,
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
      encoding: 'utf8',
    });
    const output = `${result.stdout}${result.stderr}`;
    // pytest exits 1 on a failure, 2–4 on an error of its own, 5 when it collected nothing.
    expect(result.status, output).toBe(0);
    const passed = Number(/(\d+) passed/.exec(output)?.[1] ?? 0);
    expect(passed, output).toBeGreaterThanOrEqual(AT_LEAST);
    expect(output).not.toMatch(/\d+ (skipped|xfailed|xpassed|deselected|errors?)\b/);
  });
});
