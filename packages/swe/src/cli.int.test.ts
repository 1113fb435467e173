/**
 * `vime-swe validate` through its real entry point: on rows of the published offline set every row passes
 * (unchanged fails F2P, gold resolves, each graded in a fresh bubblewrap sandbox); a row whose gold patch
 * does not resolve is reported with the reason and excluded; bad input exits 2 with no stack trace.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sharedOfflineSet } from './__fixtures__/offline-set.js';
import { ENVIRONMENTS_FILE } from './environment.js';
import type { OfflineTaskSet } from './offline/build.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'vime-swe-cli-'));
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

function vimeSwe(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', '--conditions=@vime/source', 'packages/swe/src/cli.ts', ...args],
      { cwd: root, timeout: 600_000, maxBuffer: 16 << 20 },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

let set: OfflineTaskSet;
beforeAll(async () => {
  set = await sharedOfflineSet();
}, 300_000);

/** A dataset of `rows` next to an environments.json pointing at the published mirror. */
function dataset(name: string, rows: OfflineTaskSet['rows']): string {
  const path = join(work, `${name}.jsonl`);
  writeFileSync(path, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  writeFileSync(
    join(work, ENVIRONMENTS_FILE),
    JSON.stringify({ version: 1, environments: { [set.image]: { template: set.repoDir } } }),
  );
  return path;
}

describe('vime-swe validate', () => {
  it('passes rows of the published set and excludes a row whose gold patch does not resolve', async () => {
    const good = set.rows.slice(0, 3);
    // The bug patch of another instance: its reverse (the "gold" patch) fixes a different bug.
    const broken = { ...set.rows[3]!, patch: set.rows[4]!.patch };
    const ok = await vimeSwe(['validate', dataset('good', good), '--json', join(work, 'good.json')]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain('3 of 3 rows pass the baseline');
    const verdicts = JSON.parse(await readFile(join(work, 'good.json'), 'utf8')) as Array<{ valid: boolean }>;
    expect(verdicts.map((v) => v.valid)).toEqual([true, true, true]);

    const mixed = await vimeSwe(['validate', dataset('mixed', [...good.slice(0, 1), broken])]);
    expect(mixed.code, mixed.stderr).toBe(3);
    expect(mixed.stdout).toContain('1 of 2 rows pass the baseline');
    expect(mixed.stdout).toMatch(
      new RegExp(`excluded ${broken.instance_id.replaceAll('.', '\\.')}: gold patch does not resolve`),
    );
  }, 600_000);

  it.each([
    [[], /Usage: vime-swe/],
    [['validate'], /validate needs the dataset file/],
    [['validate', '/nonexistent/rows.jsonl'], /rows\.jsonl/],
    [['validate', 'x.jsonl', '--concurrency', 'lots'], /--concurrency expects a positive whole number/],
    [['validate', 'x.jsonl', '--timeout', 'soon'], /--timeout: "soon" is not a duration/],
    [['validate', 'x.jsonl', '--sandbox', 'vm'], /--sandbox must be bubblewrap, docker or local, got "vm"/],
    [['frobnicate'], /unknown command "frobnicate"/],
    [['validate', 'x.jsonl', '--bogus'], /Unknown option '--bogus'/],
  ])(
    'bad input %j exits 2 with the fix and no stack trace',
    async (args, message) => {
      const r = await vimeSwe(args as string[]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    },
    120_000,
  );
});
