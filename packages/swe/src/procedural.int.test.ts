/**
 * The procedural task family through its real entry point, `vime-swe procedural`, with real git and pytest:
 * two instances of each operator family, each its own repository in SWE-smith's layout, every one passing
 * the project's baseline check (`vime-swe validate`: the unchanged repository fails FAIL_TO_PASS and the
 * gold patch resolves, each graded in a fresh bubblewrap sandbox), split by instance and by family, and
 * the same seed giving the same instances.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SweSmithRowSchema } from './dataset.js';
import { loadJsonl, loadParquet } from './dataset-file.js';
import { SweEnvironments } from './environment.js';
import { BUG_PATCH_SUBJECT, REMOVE_TESTS_SUBJECT } from './layout.js';
import { bugKindOf } from './offline/assets.js';
import { OPERATOR_FAMILIES } from './offline/procedural.js';
import { buildProceduralTaskSet, type ProceduralTaskSet } from './offline/procedural-build.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'vime-swe-procedural-'));
// The sandbox user reads the environments' templates.
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

function vimeSwe(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', '--conditions=@vime/source', 'packages/swe/src/cli.ts', ...args],
      { cwd: root, timeout: 300_000, maxBuffer: 16 << 20 },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

const dir = join(work, 'set');
let set: ProceduralTaskSet;
let generated: { code: number; stdout: string; stderr: string };
beforeAll(async () => {
  generated = await vimeSwe([
    'procedural',
    dir,
    '--per-family',
    '2',
    '--seed',
    '3',
    '--heldout-fraction',
    '0.5',
  ]);
  // The same folder and options: the library reuses what the CLI wrote.
  set = await buildProceduralTaskSet({ dir, perFamily: 2, seed: 3, heldoutFraction: 0.5 });
}, 300_000);

describe('vime-swe procedural', () => {
  it('writes two instances per operator family in SWE-smith row format, one repository each', async () => {
    expect(generated.code, generated.stderr).toBe(0);
    expect(generated.stdout).toMatch(
      /^12 instances \(built\): \d+ train, \d+ heldout, 2 heldout_family \(off_by_one\)/,
    );
    expect(set.built).toBe(false);
    expect(set.rows).toHaveLength(12);
    for (const family of OPERATOR_FAMILIES)
      expect(
        set.rows.filter((r) => bugKindOf(r.instance_id) === family),
        family,
      ).toHaveLength(2);
    expect(new Set(set.rows.map((r) => r.repo)).size).toBe(12);
    for (const row of set.rows) {
      expect(SweSmithRowSchema.parse(row)).toEqual(row);
      expect(row.instance_id).toMatch(/^vime__procedural\.[0-9a-f]{8}\.[a-z_]+__[0-9a-f]{8}$/);
      expect(row.FAIL_TO_PASS.length).toBeGreaterThan(0);
      expect(row.PASS_TO_PASS.length).toBeGreaterThan(0);
      // The failure output names the function, the input, what it returned and what was expected.
      expect(row.problem_statement).toMatch(/AssertionError: \w+\(.*\) returned .*, expected .*|Error/);
      expect(row.problem_statement).toContain(row.FAIL_TO_PASS[0]!);
    }
    const parquet = await loadParquet(join(dir, 'instances.parquet'), { onInvalid: 'fatal' });
    expect(parquet.rows).toEqual(set.rows);
  });

  it('splits by instance and holds one operator family out, in each row and in one file per split', async () => {
    expect(set.heldoutFamily).toBe('off_by_one');
    for (const row of set.rows) {
      const family = bugKindOf(row.instance_id);
      if (family === 'off_by_one') expect(row.split).toBe('heldout_family');
      else expect(['train', 'heldout']).toContain(row.split);
    }
    for (const [split, path] of Object.entries(set.splitPaths)) {
      const { rows } = await loadJsonl(path, { onInvalid: 'fatal' });
      expect(rows, split).toEqual(set.rows.filter((r) => r.split === split));
    }
    expect(set.tasks.map((t) => t.metadata?.split)).toEqual(set.rows.map((r) => r.split));
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
    expect(manifest.instances.map((i: { instanceId: string }) => i.instanceId)).toEqual(
      set.rows.map((r) => r.instance_id),
    );
  });

  it('lays each repository out as SWE-smith does, with its own environment', async () => {
    const environments = await SweEnvironments.forDataset(set.jsonlPath);
    expect(environments.images.sort()).toEqual(set.rows.map((r) => r.image_name).sort());
    for (const row of set.rows) {
      const repo = environments.get(row.image_name)!.template!;
      const git = (args: string[]) => execFileSync('git', args, { cwd: repo, encoding: 'utf8' });
      expect(git(['log', '--format=%s', row.instance_id]).trim().split('\n')).toEqual([
        REMOVE_TESTS_SUBJECT,
        BUG_PATCH_SUBJECT,
        'Initial commit',
      ]);
      expect(git(['diff', 'main', `${row.instance_id}~1`])).toBe(row.patch);
      const removed = git(['diff', '--name-only', `${row.instance_id}~1`, row.instance_id]).trim();
      expect(removed).toBe([...new Set(row.FAIL_TO_PASS.map((id) => id.split('::')[0]))].join('\n'));
      expect(git(['status', '--porcelain'])).toBe('');
    }
  });

  it('passes the baseline check on every row: the unchanged repository fails, the gold patch resolves', async () => {
    const r = await vimeSwe(['validate', set.jsonlPath, '--sandbox', 'bubblewrap']);
    expect(r.code, `${r.stdout}\n${r.stderr.slice(-3000)}`).toBe(0);
    expect(r.stdout).toContain('12 of 12 rows pass the baseline');
  }, 300_000);

  it('is deterministic: the same seed with fewer instances gives each family its first ones', async () => {
    const small = await buildProceduralTaskSet({
      dir: join(work, 'small'),
      perFamily: 1,
      seed: 3,
      heldoutFraction: 0.5,
    });
    expect(small.built).toBe(true);
    const firsts = OPERATOR_FAMILIES.map((f) => set.rows.find((r) => bugKindOf(r.instance_id) === f)!);
    expect(small.rows).toEqual(firsts);
  }, 300_000);
});
