// The main job's CLI (`loopMain`, what `vime-loop` and `pnpm coding-agent` run) on the bad files a user
// really hands it, dataset files and config files: every case exits 2 with one line naming the file and
// the column or the key, never a stack trace, and leaves no run folder.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXIT, memoryIo, runCli } from '@vime/core/utils';
import { afterAll, describe, expect, it } from 'vitest';
import { loopMain } from './main.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-loop-bad-input-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const row = (i: number, over: Record<string, unknown> = {}) =>
  JSON.stringify({
    instance_id: `pallets__markupsafe.620c06c9.lm_rewrite__abc${i}`,
    repo: 'swesmith/pallets__markupsafe.620c06c9',
    patch: 'diff --git a/a.py b/a.py\n',
    FAIL_TO_PASS: ['tests/test_a.py::test_one'],
    PASS_TO_PASS: [],
    image_name: 'swebench/swesmith.x86_64.pallets_1776_markupsafe.620c06c9',
    ...over,
  });
const file = (name: string, content: string | Uint8Array) => {
  writeFileSync(join(dir, name), content);
  return join(dir, name);
};
mkdirSync(join(dir, 'a-folder'));

async function main(args: string[]) {
  const out = join(dir, `out-${Math.random().toString(36).slice(2)}`);
  const io = memoryIo({ cwd: dir });
  const code = await runCli('coding-agent', loopMain, { argv: ['--out', out, '--quiet', ...args], io });
  return { code, out, ...io.output };
}

function expectUsage(r: Awaited<ReturnType<typeof main>>, message: RegExp | string) {
  expect(r.code, r.stderr).toBe(EXIT.usage);
  expect(r.stderr).not.toMatch(/\n\s+at |TypeError|internal error/);
  expect(r.stderr.startsWith('coding-agent: ')).toBe(true);
  if (typeof message === 'string') expect(r.stderr).toContain(message);
  else expect(r.stderr).toMatch(message);
  expect(existsSync(r.out), `left ${r.out}`).toBe(false);
}

describe('the main job on a bad dataset file', () => {
  it.each([
    ['missing.jsonl', () => join(dir, 'missing.jsonl'), /missing\.jsonl: does not exist; give a SWE-smith/],
    ['a folder', () => join(dir, 'a-folder'), /a-folder: is a folder, not a dataset file/],
    ['empty', () => file('empty.jsonl', ''), /empty\.jsonl: is empty/],
    [
      'random bytes as fake.parquet',
      () =>
        file(
          'fake.parquet',
          Uint8Array.from({ length: 4000 }, (_, i) => (i * 7919) % 251),
        ),
      /fake\.parquet: is not a parquet file \(it does not start with PAR1\)/,
    ],
    [
      'PAR1\\0\\0\\0\\0PAR1',
      () => file('zero.parquet', Buffer.from('PAR1\0\0\0\0PAR1', 'latin1')),
      /zero\.parquet: is a damaged parquet file: its footer gives the metadata as 0 bytes/,
    ],
    [
      'a string FAIL_TO_PASS',
      () => file('rows.jsonl', `${row(1)}\n${row(2, { FAIL_TO_PASS: 'tests/test_a.py::test_one' })}\n`),
      /rows\.jsonl: row 2 \(instance pallets__markupsafe\.620c06c9\.lm_rewrite__abc2\): column FAIL_TO_PASS: expected a list of test names, got string "tests\/test_a\.py::test_one"; write it as a list of strings/,
    ],
    [
      'a duplicate instance id',
      () => file('dups.jsonl', `${row(1)}\n${row(1)}\n`),
      /dups\.jsonl: row 2 \(instance .*abc1\): column instance_id: duplicates row 1/,
    ],
    [
      'two bad rows (the first named, the rest counted)',
      () => file('two.jsonl', `${row(1, { image_name: '' })}\n${row(2, { PASS_TO_PASS: 'x' })}\n`),
      /two\.jsonl: row 1 .*column image_name: .*\(and 1 more: `vime-swe validate .*two\.jsonl` lists every one; fix them, or pass --invalid-rows skip/,
    ],
  ])('%s', async (_name, make, message) => {
    const r = await main(['--dataset', make(), '--no-validate']);
    expectUsage(r, message);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  });
});

describe('the main job on a bad config file', () => {
  it.each([
    [
      'unknown key',
      'sampling:\n  temprature: 0.6\n',
      'unknown key sampling.temprature (did you mean "sampling.temperature"?)',
    ],
    [
      'key in the wrong section',
      'max_turns: 20\n',
      'unknown key max_turns (did you mean "agents.max_turns"?)',
    ],
    [
      'wrong value',
      'sampling: { top_p: 1.5 }\n',
      'sampling.top_p: number 1.5 is not accepted; write a value ≤ 1',
    ],
    ['wrong type', 'run: { steps: many }\n', 'run.steps: string "many" is not accepted; write a number'],
    [
      'enum typo',
      'sandbox: { provider: dokcer }\n',
      'sandbox.provider: string "dokcer" is not accepted (did you mean "docker"?)',
    ],
    [
      'bad duration',
      'grading: { timeout: soon }\n',
      'grading.timeout: string "soon" is not accepted; write a duration',
    ],
    [
      'bad YAML',
      'run:\n  steps: [1\n',
      /--config .*cfg\.yaml: not valid YAML or JSON at line \d+, column \d+/,
    ],
  ])('%s', async (_name, text, message) => {
    const r = await main(['--config', file('cfg.yaml', text)]);
    expectUsage(r, message);
    expect(r.stderr).toContain('--config ');
  });

  it('a missing config file, and a folder', async () => {
    expectUsage(await main(['--config', 'nope.yaml']), '--config nope.yaml: does not exist');
    expectUsage(await main(['--config', 'a-folder']), '--config a-folder: is a folder');
  });

  it('a flag still wins over the file, and its mistake names the flag', async () => {
    const cfg = file('ok.yaml', 'sampling: { temperature: 0.6 }\n');
    expectUsage(
      await main(['--config', cfg, '--temperature', 'hot']),
      '--temperature: "hot" is not a number',
    );
  });
});
