import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeSamples } from '@vime/core';
import { afterAll, describe, expect, it } from 'vitest';
import { makeDemoBatch } from './batch.js';
import { findTorchPython } from './python.js';

const example = fileURLToPath(new URL('..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'vime-megatron-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function runPython(python: string, args: string[]) {
  const result = spawnSync(python, args, {
    cwd: example,
    encoding: 'utf8',
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
  });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

describe('the trainer’s Python side on CPU (batch reader, group normalisation, packing, loss, dumps)', () => {
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
  const { python } = found;

  it('passes its pytest suite against slime’s golden vectors and dumps', () => {
    const { status, output } = runPython(python, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests']);
    expect(status, output).toBe(0);
    const passed = Number(/(\d+) passed/.exec(output)?.[1] ?? 0);
    expect(passed, output).toBeGreaterThanOrEqual(20);
    expect(output).not.toMatch(/skipped|xfail/);
  });

  it('reads a batch written by encodeSamples and rejects a corrupted one by sample and field', () => {
    const samples = makeDemoBatch({
      seed: 7,
      groups: [
        [1, 0, 1, 0, 0, 0],
        [0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
      ],
    });
    const path = join(scratch, 'six.msgpack');
    writeFileSync(path, encodeSamples(samples));
    const out = join(scratch, 'six');
    const ok = runPython(python, ['-m', 'vime_megatron.dry_run', '--batch', path, '--out', out]);
    expect(ok.status, ok.output).toBe(0);
    expect(ok.output).toContain('for 12 samples');

    const broken = samples.map((s) => ({ ...s }));
    broken[5]!.reward = null;
    broken[5]!.status = 'failed';
    const badPath = join(scratch, 'broken.msgpack');
    writeFileSync(badPath, encodeSamples(broken));
    const bad = runPython(python, ['-m', 'vime_megatron.dry_run', '--batch', badPath, '--out', out]);
    expect(bad.status).not.toBe(0);
    expect(bad.output).toContain("sample [5].reward: missing (status 'failed')");
  });
});
