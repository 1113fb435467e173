/**
 * The example's Python suite (safetensors IO, the Qwen3 model, sampling, the engine, the HTTP server,
 * the warm start), run with the Python that has torch.
 */
import { spawnSync } from 'node:child_process';
import { torchPythonOrSkip } from '@vime/core/testing';
import { describe, expect, it } from 'vitest';
import { exampleDir, pythonEnv } from '../src/index.js';

describe('the policy’s Python side on CPU', () => {
  const python = torchPythonOrSkip();
  if (!python) return;

  it('passes its pytest suite', { timeout: 900_000 }, () => {
    const result = spawnSync(python, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], {
      cwd: exampleDir,
      env: pythonEnv(),
      encoding: 'utf8',
    });
    const output = `${result.stdout}${result.stderr}`;
    expect(result.status, output).toBe(0);
    const passed = Number(/(\d+) passed/.exec(output)?.[1] ?? 0);
    expect(passed, output).toBeGreaterThanOrEqual(100);
    expect(output).not.toMatch(/skipped|xfail|deselected/);
  });
});
