// The batch writer's entry point: --help, a user's mistakes as exit 2 with the flag named and no stack
// trace, and a real batch when the input is right.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeSamples } from '@vime/core';
import { afterAll, describe, expect, it } from 'vitest';

const example = fileURLToPath(new URL('..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'vime-make-batch-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function makeBatch(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', '--conditions=@vime/source', 'src/make-batch.ts', ...args],
      { cwd: example, timeout: 60_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
    );
  });
}

const STACK = /^\s+at .+[:(]|\w+Error \[ERR_/m;

describe('make-batch.ts', () => {
  it('answers --help and refuses bad input with exit 2, the flag named, no stack trace', async () => {
    writeFileSync(join(scratch, 'a-file'), 'x');
    const cases: Array<[string[], number, string]> = [
      [['--help'], 0, 'Usage: make-batch.ts'],
      [['-h', '--bogus'], 0, 'Usage: make-batch.ts'],
      [['--bogus'], 2, "make-batch: Unknown option '--bogus'; see --help"],
      [['extra'], 2, "Unexpected argument 'extra'"],
      [['--out'], 2, "Option '--out <value>' argument missing"],
      [['--vocab', '1'], 2, '--vocab must be a whole number >= 2, got "1"'],
      [['--seed', '1.5'], 2, '--seed must be a whole number, got "1.5"'],
      [
        ['--out', join(scratch, 'missing', 'batch.msgpack')],
        2,
        `--out ${join(scratch, 'missing', 'batch.msgpack')}: cannot write it: ENOENT`,
      ],
      [['--out', join(scratch, 'a-file', 'batch.msgpack')], 2, 'cannot write it: ENOTDIR'],
      [['--out', scratch], 2, `--out ${scratch}: cannot write it: EISDIR`],
    ];
    const results = await Promise.all(cases.map(([args]) => makeBatch(args)));
    results.forEach((r, i) => {
      const [args, code, message] = cases[i]!;
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(code);
      expect(code === 0 ? r.stdout : r.stderr, args.join(' ')).toContain(message);
      expect(r.stderr, args.join(' ')).not.toMatch(STACK);
    });
  });

  it('writes the demo batch', async () => {
    const out = join(scratch, 'batch.msgpack');
    const r = await makeBatch(['--out', out, '--vocab', '500', '--seed', '7']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^wrote \d+ samples/);
    const samples = decodeSamples(new Uint8Array(readFileSync(out)));
    expect(samples.length).toBeGreaterThan(0);
    expect(samples.every((s) => Array.from(s.tokens).every((t) => t >= 0 && t < 500))).toBe(true);
  });
});
