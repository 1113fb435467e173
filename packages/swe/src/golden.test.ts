/**
 * Every golden vector in the repository's `golden/swe` (computed by SWE-bench's and SWE-smith's own code), read in
 * place. Each assertion names the vector's id.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { swesmithNames } from './dataset.js';
import { getLogsEval, gradeReport, readTestOutput, validReport } from './eval-report.js';
import { BUG_PATCH_SUBJECT, REMOVE_TESTS_SUBJECT } from './layout.js';
import { type ParserId, parseTestLog } from './parsers/index.js';
import { pythonTestFiles, resolveProfile, testCommandFor } from './profiles.js';

const goldenDir = new URL('../../../golden/swe/', import.meta.url);

// biome-ignore lint/suspicious/noExplicitAny: vectors are heterogeneous JSON; the assertions check their shape
type Json = any;

interface Vector {
  id: string;
  kind: string;
  log: string;
  expected: Json;
  meta: Record<string, Json>;
  [key: string]: Json;
}

const vectors: Vector[] = readdirSync(goldenDir)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .map((f) => JSON.parse(readFileSync(new URL(f, goldenDir), 'utf8')) as Vector);

const byKind = (kind: string) => vectors.filter((v) => v.kind === kind).map((v) => [v.id, v] as const);

/** `swebench-main__parse_log_pytest_v2__…` → parser `pytest_v2`, ref `main`; SWE-smith → its profile. */
function parserOf(v: Vector): { parser: ParserId; ref: 'v4.1.0' | 'main' } {
  const [family, fn] = v.id.split('__') as [string, string];
  if (family === 'swesmith') return { parser: `swesmith:${v.meta.profile}`, ref: 'v4.1.0' };
  const ref = family === 'swebench-main' ? 'main' : 'v4.1.0';
  return { parser: fn.replace(/^parse_log_/, '') as ParserId, ref };
}

function semanticsOf(id: string) {
  if (id.startsWith('swesmith')) return 'swesmith' as const;
  return id.startsWith('swebench-main') ? ('swebench-main' as const) : ('swebench-v4.1.0' as const);
}

const asPlain = (m: object) => ({ ...m });

describe('golden vectors are present', () => {
  it('finds the folder and every kind', () => {
    expect(vectors.length).toBeGreaterThan(100);
    for (const kind of [
      'parse',
      'grade',
      'logs_eval',
      'read_test_output',
      'profile',
      'swesmith_eval',
      'swesmith_valid',
      'branch_layout',
    ]) {
      expect(byKind(kind).length, kind).toBeGreaterThan(0);
    }
  });
});

describe('parse', () => {
  it.each(byKind('parse'))('%s', (id, v) => {
    const got = parseTestLog(v.log, parserOf(v));
    expect(asPlain(got), id).toEqual(v.expected);
  });
});

describe('grade', () => {
  it.each(byKind('grade'))('%s', (id, v) => {
    const got = gradeReport(
      { statusMap: v.status_map, failToPass: v.instance.FAIL_TO_PASS, passToPass: v.instance.PASS_TO_PASS },
      { semantics: semanticsOf(id), evalType: v.eval_type === 'fail_only' ? 'fail_only' : 'pass_and_fail' },
    );
    expect(got, id).toEqual(v.expected);
  });
});

describe('logs_eval', () => {
  it.each(byKind('logs_eval'))('%s', (id, v) => {
    const parser = (v.test_spec.log_parser ?? 'parse_log_pytest').replace(/^parse_log_/, '') as ParserId;
    const ref = id.startsWith('swebench-main') ? 'main' : 'v4.1.0';
    const got = getLogsEval(v.log, (text) => parseTestLog(text, { parser, ref }), ref);
    expect({ status_map: asPlain(got.statusMap), found: got.found }, id).toEqual(v.expected);
  });
});

describe('read_test_output', () => {
  it.each(byKind('read_test_output'))('%s', (id, v) => {
    expect(readTestOutput(v.log), id).toEqual(v.expected);
  });
});

describe('profile', () => {
  it.each(byKind('profile'))('%s', (id, v) => {
    const profile = resolveProfile(v.instance.repo);
    const command = testCommandFor(profile, v.instance);
    expect(command, id).toBe(v.expected.get_test_cmd[0]);
    expect(profile.testFiles(v.instance), id).toEqual(v.expected.get_test_files);
    const names = swesmithNames(v.instance.instance_id, { arch: v.expected.arch });
    expect(names, id).toEqual({
      repoName: v.expected.repo_name,
      mirrorName: v.expected.mirror_name,
      imageName: v.expected.image_name,
    });
  });
});

describe('swesmith_valid', () => {
  it.each(byKind('swesmith_valid'))('%s', (id, v) => {
    const parse = (log: string) =>
      parseTestLog(readTestOutput(log).content ?? '', { parser: `swesmith:${v.instance.repo}` });
    expect(validReport(parse(v.log), parse(v.log_reference)), id).toEqual(v.expected);
  });
});

describe('swesmith_eval', () => {
  it.each(byKind('swesmith_eval'))('%s', (id, v) => {
    if (v.expected.apply_failed) {
      // Upstream: no apply command takes a patch that re-creates a removed test file; no log is written.
      expect(v.log, id).toBe('');
      expect(readTestOutput('>>>>> Patch Apply Failed:\n').content, id).toBeNull();
      const restored = pythonTestFiles(v.instance).flat();
      const touched = [...v.prediction.model_patch.matchAll(/^diff --git a\/(\S+) b\//gm)].map((m) => m[1]);
      expect(
        touched.some((f: string) => restored.includes(f)),
        id,
      ).toBe(true);
      return;
    }
    const { content } = readTestOutput(v.log);
    const statusMap = parseTestLog(content ?? '', { parser: `swesmith:${v.instance.repo}` });
    const report = gradeReport(
      { statusMap, failToPass: v.instance.FAIL_TO_PASS, passToPass: v.instance.PASS_TO_PASS },
      { semantics: 'swesmith' },
    );
    expect(report.tests_status, id).toEqual(v.expected.tests_status);
    expect(report.resolution === 'RESOLVED_FULL', id).toBe(v.expected.resolved);
  });
});

describe('branch_layout', () => {
  it.each(byKind('branch_layout'))('%s', (id, v) => {
    const [f2pFiles] = pythonTestFiles(v.instance);
    expect(f2pFiles, id).toEqual(v.expected.removed_at_tip);
    const atTip = v.expected['files_at_HEAD~1'].filter((f: string) => !f2pFiles.includes(f));
    expect(atTip, id).toEqual(v.expected.files_at_branch_tip);
    expect(v.expected.commits_on_branch_newest_first, id).toEqual([REMOVE_TESTS_SUBJECT, BUG_PATCH_SUBJECT]);
  });
});
