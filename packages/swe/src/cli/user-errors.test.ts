// `vime-swe` answers a user's mistakes in-process through `main` (what the bin calls): exit 2, one line
// naming the flag or command with the closest right one, no stack trace, and nothing graded or built.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXIT, memoryIo } from '@vime/core/utils';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from './main.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-swe-errors-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
writeFileSync(join(dir, 'rows.jsonl'), '');

async function vimeSwe(args: string[]) {
  const io = memoryIo({ cwd: dir });
  const code = await main(args, io);
  return { code, ...io.output };
}

describe('vime-swe: mistakes on the command line', () => {
  it.each([
    [
      ['validate', 'rows.jsonl', '--concurency', '2'],
      `Unknown option '--concurency' (did you mean "--concurrency"?)`,
    ],
    [['offline', 'out', '--dokcer'], `Unknown option '--dokcer' (did you mean "--docker"?)`],
    [
      ['valdate', 'rows.jsonl'],
      'unknown command "valdate" (did you mean "validate"?); commands: validate, offline, procedural',
    ],
    [['ofline', 'out'], 'unknown command "ofline" (did you mean "offline"?)'],
    [
      ['validate', 'rows.jsonl', '--concurrency', 'lots'],
      '--concurrency expects a positive whole number, got "lots"',
    ],
    [
      ['validate', 'rows.jsonl', '--sandbox', 'dokcer'],
      '--sandbox must be bubblewrap, docker or local, got "dokcer" (did you mean "docker"?)',
    ],
    [['validate', 'rows.jsonl', '--timeout', 'soon'], '--timeout: "soon" is not a duration'],
    [
      ['validate', 'rows.jsonl', 'more.jsonl'],
      'unexpected argument "more.jsonl"; see `vime-swe validate --help`',
    ],
    [['offline', 'out', '--concurrency', '2'], `Unknown option '--concurrency'`],
    [['validate'], 'validate needs the dataset file'],
    [['procedural'], 'procedural needs an output folder'],
    [['procedural', 'out', '--per-family', '0'], '--per-family expects a positive whole number, got "0"'],
    [['procedural', 'out', '--seed', '1.5'], '--seed expects a whole number, got "1.5"'],
    [
      ['procedural', 'out', '--heldout-family', 'off-by-one'],
      '--heldout-family must be flip_comparison, off_by_one, wrong_constant, swapped_args, wrong_operator, missing_branch or none, got "off-by-one" (did you mean "off_by_one"?)',
    ],
    [
      ['procedural', 'out', '--heldout-fraction', '1'],
      '--heldout-fraction expects a number from 0 up to (not including) 1, got "1"',
    ],
    [['procedural', 'out', '--heldout-fraction=-0.1'], '--heldout-fraction expects a number ≥ 0, got "-0.1"'],
    [
      ['procedural', 'out', '--concurrency', 'many'],
      '--concurrency expects a positive whole number, got "many"',
    ],
    [
      ['procedural', 'out', '--per-famly', '2'],
      `Unknown option '--per-famly' (did you mean "--per-family"?)`,
    ],
    [['validate', 'rows.jsonl'], 'rows.jsonl: is empty; write one SWE-smith row per line'],
  ])('%j', async (args, message) => {
    const r = await vimeSwe(args);
    expect(r.code, r.stderr).toBe(EXIT.usage);
    expect(r.stderr).toBe(`vime-swe: ${r.stderr.slice('vime-swe: '.length).split('\n')[0]}\n`);
    expect(r.stderr).toContain(message);
    expect(r.stdout).toBe('');
  });

  it('answers --help for the program and each command', async () => {
    const top = await vimeSwe(['--help']);
    expect(top.code).toBe(EXIT.ok);
    expect(top.stdout).toMatch(/^vime-swe: [\s\S]*validate DATASET[\s\S]*offline DIR[\s\S]*Exit codes:/);
    for (const command of ['validate', 'offline', 'procedural']) {
      const r = await vimeSwe([command, '--bogus', '--help']);
      expect(r.code).toBe(EXIT.ok);
      expect(r.stdout).toMatch(new RegExp(`^Usage: vime-swe ${command}`));
    }
  });
});
