/**
 * Grading exactly as upstream: SWE-smith's `get_eval_tests_report` + SWE-bench v4.1.0's
 * `get_resolution_status` (what SWE-smith training used), SWE-bench v4.1.0 and SWE-bench main.
 */
import { ConfigError } from '@vime/core';
import type { StatusMap } from './parsers/types.js';

/** Whose grading rules apply: SWE-smith's, or SWE-bench's at a version. */
export type GradingSemantics = 'swesmith' | 'swebench-v4.1.0' | 'swebench-main';
/** Whether both test lists count, or FAIL_TO_PASS alone. */
export type EvalType = 'pass_and_fail' | 'fail_only';
/** How much of the task a patch resolves. */
export type Resolution = 'RESOLVED_FULL' | 'RESOLVED_PARTIAL' | 'RESOLVED_NO';

/** Tests that passed and failed, by name. */
export interface TestBucket {
  success: string[];
  failure: string[];
}

/** The FAIL_TO_PASS and PASS_TO_PASS tests, each split into passed and failed. */
export interface TestsStatus {
  FAIL_TO_PASS: TestBucket;
  PASS_TO_PASS: TestBucket;
  FAIL_TO_FAIL: TestBucket;
  PASS_TO_FAIL: TestBucket;
}

/** A patch's grade: its tests' status and the resolution. */
export interface GradeReport {
  tests_status: TestsStatus;
  resolution: Resolution;
}

/** What a grade is computed from: each test's status and the task's FAIL_TO_PASS and PASS_TO_PASS lists. */
export interface GradeInput {
  statusMap: StatusMap;
  failToPass: readonly string[];
  passToPass: readonly string[];
}

/** Options of `gradeReport`. */
export interface GradeOptions {
  /** Default `swesmith`. */
  semantics?: GradingSemantics | undefined;
  /** Default `pass_and_fail`. `fail_only` counts a test as failed only on an explicit `FAILED`. */
  evalType?: EvalType | undefined;
}

/** SWE-bench main: an id with more `[` than `]` was cut at a space by the parser; match it as a prefix. */
function resolveCase(id: string, map: StatusMap, main: boolean): string | undefined {
  if (Object.hasOwn(map, id)) return id;
  if (!main || count(id, '[') <= count(id, ']')) return undefined;
  for (const key of Object.keys(map)) if (key.startsWith(id)) return key;
  return undefined;
}

function count(s: string, ch: string): number {
  let n = 0;
  for (const c of s) if (c === ch) n++;
  return n;
}

function statusOf(id: string, map: StatusMap, main: boolean): string | undefined {
  const key = resolveCase(id, map, main);
  return key === undefined ? undefined : map[key];
}

/** Grade a test run as SWE-smith or SWE-bench does: the tests' status and the resolution. */
export function gradeReport(input: GradeInput, options: GradeOptions = {}): GradeReport {
  const { semantics = 'swesmith', evalType = 'pass_and_fail' } = options;
  if (semantics !== 'swesmith' && semantics !== 'swebench-v4.1.0' && semantics !== 'swebench-main') {
    throw new ConfigError(
      `gradeReport: semantics must be "swesmith", "swebench-v4.1.0" or "swebench-main", got ${JSON.stringify(semantics)}`,
    );
  }
  if (evalType !== 'pass_and_fail' && evalType !== 'fail_only') {
    throw new ConfigError(
      `gradeReport: evalType must be "pass_and_fail" or "fail_only", got ${JSON.stringify(evalType)}`,
    );
  }
  const main = semantics === 'swebench-main';
  const map = input.statusMap;
  const passed = (id: string) => {
    const s = statusOf(id, map, main);
    return s === 'PASSED' || s === 'XFAIL';
  };
  const failed = (id: string) => {
    const s = statusOf(id, map, main);
    return s === undefined || s === 'FAILED' || s === 'ERROR' || (main && s === 'SKIPPED');
  };
  // main: a PASS_TO_PASS test that is skipped is still "maintained".
  const maintained = (id: string) => passed(id) || (main && statusOf(id, map, main) === 'SKIPPED');

  const bucket = (ids: readonly string[], ok: (id: string) => boolean): TestBucket => {
    const b: TestBucket = { success: [], failure: [] };
    for (const id of ids) {
      if (evalType === 'fail_only') {
        (statusOf(id, map, main) === 'FAILED' ? b.failure : b.success).push(id);
      } else if (ok(id)) b.success.push(id);
      else if (failed(id)) b.failure.push(id);
    }
    return b;
  };

  const tests_status: TestsStatus = {
    FAIL_TO_PASS: bucket(input.failToPass, passed),
    PASS_TO_PASS: bucket(input.passToPass, main ? maintained : passed),
    FAIL_TO_FAIL: { success: [], failure: [] },
    PASS_TO_FAIL: { success: [], failure: [] },
  };
  return { tests_status, resolution: resolutionOf(tests_status) };
}

/** `success / (success + failure)`, 1 when both are empty (upstream's convention). */
function rate(b: TestBucket): number {
  const total = b.success.length + b.failure.length;
  return total === 0 ? 1 : b.success.length / total;
}

/** SWE-bench `get_resolution_status`. */
export function resolutionOf(status: TestsStatus): Resolution {
  const f2p = rate(status.FAIL_TO_PASS);
  const p2p = rate(status.PASS_TO_PASS);
  if (f2p === 1 && p2p === 1) return 'RESOLVED_FULL';
  if (f2p < 1 && f2p > 0 && p2p === 1) return 'RESOLVED_PARTIAL';
  return 'RESOLVED_NO';
}

// --- eval.sh markers and log slicing -------------------------------------------------------------------

export const MARKERS = {
  start: '>>>>> Start Test Output',
  end: '>>>>> End Test Output',
  applyFailed: '>>>>> Patch Apply Failed',
  resetFailed: '>>>>> Reset Failed',
  testsErrored: '>>>>> Tests Errored',
  timedOut: '>>>>> Tests Timed Out',
  exitCode: '>>>>> Test Exit Code',
} as const;

/** Python slicing `s[a:b]` (negative indices count from the end). */
function pySlice(s: string, a: number, b: number): string {
  const norm = (i: number) => (i < 0 ? Math.max(0, s.length + i) : Math.min(i, s.length));
  return s.slice(norm(a), Math.max(norm(a), norm(b)));
}

/**
 * SWE-smith `read_test_output`: `null` when the patch did not apply or the tests timed out; the whole log
 * (found false) when a marker is missing; else the text between the `set -x` traces of the two markers.
 */
export function readTestOutput(log: string): { content: string | null; found: boolean } {
  if (log.includes(MARKERS.applyFailed) || log.includes(MARKERS.timedOut))
    return { content: null, found: false };
  if (!(log.includes(MARKERS.start) && log.includes(MARKERS.end))) return { content: log, found: false };
  const startSep = `+ : '${MARKERS.start}'`;
  const endSep = `+ : '${MARKERS.end}'`;
  const start = log.indexOf(startSep);
  const end = log.indexOf(endSep);
  if (start > end) throw new ConfigError('readTestOutput: the end marker comes before the start marker');
  return {
    content: pySlice(pySlice(log, start, end), startSep.length, Number.MAX_SAFE_INTEGER),
    found: true,
  };
}

const suiteRan =
  /(?:\b\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b|\bRan \d+ tests?\b|\bcollected \d+ items?\b|tests finished:|^(?:ok|FAIL|PASS)\s)/m;

/**
 * SWE-bench `get_logs_eval` over a whole eval-script log: `found` false (and an empty map) when a failure
 * marker is present or a marker is missing. `swebench-main` also rejects a run with no sign that a suite
 * ran, and a non-zero recorded exit code with no FAILED/ERROR in the map (its guard against spoofed logs).
 */
export function getLogsEval(
  log: string,
  parse: (text: string) => StatusMap,
  ref: 'v4.1.0' | 'main' = 'v4.1.0',
): { statusMap: StatusMap; found: boolean } {
  const bad = [MARKERS.applyFailed, MARKERS.resetFailed, MARKERS.testsErrored, MARKERS.timedOut];
  if (bad.some((m) => log.includes(m))) return { statusMap: {}, found: false };
  if (!(log.includes(MARKERS.start) && log.includes(MARKERS.end))) return { statusMap: {}, found: false };
  const between = log.split(MARKERS.start)[1]!.split(MARKERS.end)[0]!;
  let statusMap = parse(between);
  if (Object.keys(statusMap).length === 0) statusMap = parse(log);
  if (ref === 'main') {
    if (Object.keys(statusMap).length === 0 && !suiteRan.test(between))
      return { statusMap: {}, found: false };
    const exit = recordedExitCode(log);
    const anyFailure = Object.values(statusMap).some((s) => s === 'FAILED' || s === 'ERROR');
    if (exit !== undefined && exit !== 0 && !anyFailure) return { statusMap: {}, found: false };
  }
  return { statusMap, found: true };
}

/** The `>>>>> Test Exit Code: N` line eval scripts write after the end marker (SWE-bench 5 style). */
export function recordedExitCode(log: string): number | undefined {
  const m = /^>>>>> Test Exit Code: (-?\d+)\s*$/m.exec(log);
  return m ? Number(m[1]) : undefined;
}

/** SWE-smith `get_valid_report`: compare a buggy run with the clean run (PASSED/FAILED only). */
export function validReport(
  buggy: StatusMap,
  clean: StatusMap,
): { FAIL_TO_PASS: string[]; PASS_TO_PASS: string[]; FAIL_TO_FAIL: string[]; PASS_TO_FAIL: string[] } {
  const report = {
    FAIL_TO_PASS: [] as string[],
    PASS_TO_PASS: [] as string[],
    FAIL_TO_FAIL: [] as string[],
    PASS_TO_FAIL: [] as string[],
  };
  for (const [id, after] of Object.entries(clean)) {
    if (!Object.hasOwn(buggy, id)) continue;
    const before = buggy[id];
    if (before === 'PASSED' && after === 'PASSED') report.PASS_TO_PASS.push(id);
    else if (before === 'FAILED' && after === 'PASSED') report.FAIL_TO_PASS.push(id);
    else if (before === 'FAILED' && after === 'FAILED') report.FAIL_TO_FAIL.push(id);
    else if (before === 'PASSED' && after === 'FAILED') report.PASS_TO_FAIL.push(id);
  }
  return report;
}
