/**
 * The example's Python suite (safetensors IO, the Qwen3 model, sampling, the engine, the HTTP server,
 * the warm start), run with the Python that has torch.
 */
import { spawnSync } from 'node:child_process';
import { findTorchPython } from '@vime/example-megatron-trainer/python';
import { describe, expect, it } from 'vitest';
import { exampleDir, pythonEnv } from '../src/index.js';

describe('the policy’s Python side on CPU', () => {
  const found = findTorchPython();
  if ('missing' in found) {
    const message =
      `SKIPPED: no Python with torch, msgpack and pytest (${found.missing}). ` +
      'Install Debian’s python3-torch python3-msgpack python3-pytest, or point VIME_PYTHON at one.';
    console.warn(message);
    if (process.env.VIME_REQUIRE_TORCH === '1') {
      it('finds a Python with torch (VIME_REQUIRE_TORCH=1)', () => {
        throw new Error(message);
      });
    } else {
      it.skip(message, () => {});
    }
    return;
  }

  it('passes its pytest suite', { timeout: 900_000 }, () => {
    const result = spawnSync(found.python, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], {
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
