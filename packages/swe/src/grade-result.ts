/**
 * Turning what a grading run saw into a `Graded` result: a patch that failed before its tests could count,
 * a run graded from the grader's report channel (pytest), and a run graded from its log (other runners).
 */
import type { TaskSpec } from '@vime/core';
import {
  exitCodeMismatch,
  type HackFlag,
  type HackPolicy,
  resultsAfterSummary,
  SUSPICIOUS,
} from './antihack.js';
import { type GradeReport, gradeReport, readTestOutput, recordedExitCode } from './eval-report.js';
import type { RunFrame } from './grade-run.js';
import type { Graded, GradeOutcome, GradeSweOptions, InfraError, InfraReason } from './grade-types.js';
import { gradingStatusMap, judgeFrame } from './grade-verdict.js';
import { type ParserId, parseTestLog } from './parsers/index.js';
import type { StatusMap } from './parsers/types.js';

export const infra = (reason: InfraReason, message: string, extra: Partial<InfraError> = {}): InfraError => ({
  status: 'infra_error',
  reason,
  message,
  ...extra,
});

export function emptyStatus(): GradeReport['tests_status'] {
  const bucket = () => ({ success: [], failure: [] });
  return { FAIL_TO_PASS: bucket(), PASS_TO_PASS: bucket(), FAIL_TO_FAIL: bucket(), PASS_TO_FAIL: bucket() };
}

export const hackKinds = (flags: readonly HackFlag[]) => [
  ...new Set(flags.filter((f) => SUSPICIOUS.has(f.kind)).map((f) => f.kind)),
];

/** Zero for a patch that failed before its tests could count. */
export function failedPatch(
  outcome: GradeOutcome,
  patch: string,
  flags: HackFlag[],
  started: number,
  extra: Partial<Graded> = {},
): Graded {
  return {
    status: 'graded',
    outcome,
    reward: 0,
    tests_status: emptyStatus(),
    resolution: 'RESOLVED_NO',
    semantics: 'swesmith',
    statusMap: {},
    channel: 'log',
    canaries: [],
    patch,
    appliedWith: null,
    exitCode: undefined,
    timedOut: false,
    log: '',
    flags,
    hacks: hackKinds(flags),
    durationMs: performance.now() - started,
    ...extra,
  };
}

export type FinishOptions = GradeSweOptions & { semantics: 'swesmith' | 'strict'; onSuspicious: HackPolicy };
export interface RunBase {
  log: string;
  appliedWith: string | null;
  timedOut: boolean;
}

const swesmithGrader = (task: TaskSpec) => task.grader as Extract<TaskSpec['grader'], { kind: 'swesmith' }>;

/** The outcome, resolution and reward once the hacks are known. */
function settle(
  report: GradeReport,
  flags: HackFlag[],
  onSuspicious: HackPolicy,
  complete: boolean,
): { report: GradeReport; outcome: GradeOutcome; reward: 0 | 1; hacks: HackFlag['kind'][] } {
  const hacks = hackKinds(flags);
  const zeroed = hacks.length > 0 && onSuspicious === 'zero';
  if (zeroed || !complete) report = { tests_status: report.tests_status, resolution: 'RESOLVED_NO' };
  const outcome: GradeOutcome = !complete
    ? 'tests_cut_short'
    : zeroed
      ? hacks.includes('tampered')
        ? 'tampered'
        : 'hack_detected'
      : 'tests_ran';
  return { report, outcome, reward: report.resolution === 'RESOLVED_FULL' ? 1 : 0, hacks };
}

/**
 * A pytest run graded from the grader's report channel: outcomes from the plugin's records (a pass only
 * when pytest and the plugin's own call record agree), canaries judged, the process's exit code checked
 * against pytest's session, a run without its session's end cut short.
 */
export function finishFromFrame(
  task: TaskSpec,
  patch: string,
  flags: HackFlag[],
  started: number,
  options: FinishOptions,
  base: RunBase,
  frame: RunFrame,
): Graded {
  const { semantics, evalType = 'pass_and_fail', onSuspicious } = options;
  const grader = swesmithGrader(task);
  const wanted = [...grader.failToPass, ...grader.passToPass];
  const verdict = judgeFrame(frame, wanted, semantics === 'strict');
  flags.push(...verdict.flags);
  const report = gradeReport(
    {
      statusMap: gradingStatusMap(verdict.statusMap, grader.passToPass, semantics),
      failToPass: grader.failToPass,
      passToPass: grader.passToPass,
    },
    { semantics: semantics === 'strict' ? 'swebench-main' : 'swesmith', evalType },
  );
  const complete = verdict.exitstatus !== undefined && !frame.overflow;
  const settled = settle(report, flags, onSuspicious, complete);
  return {
    status: 'graded',
    ...settled.report,
    outcome: settled.outcome,
    reward: settled.reward,
    semantics,
    statusMap: verdict.statusMap,
    channel: 'report',
    canaries: verdict.canaries,
    patch,
    exitCode: verdict.exitCode,
    flags,
    hacks: settled.hacks,
    durationMs: performance.now() - started,
    ...base,
  };
}

/** A run of another runner graded from its log, SWE-smith's way, with the log-level guards. */
export function finishFromLog(
  task: TaskSpec,
  patch: string,
  flags: HackFlag[],
  started: number,
  options: FinishOptions,
  base: RunBase,
): Graded {
  const { semantics, evalType = 'pass_and_fail', onSuspicious } = options;
  const grader = swesmithGrader(task);
  const exitCode = recordedExitCode(base.log);
  const { content } = readTestOutput(base.log);
  const parser =
    options.parser ??
    (grader.parser as ParserId | undefined) ??
    (`swesmith:${String(task.metadata.repo ?? task.id)}` as ParserId);
  let statusMap: StatusMap = {};
  try {
    if (content !== null)
      statusMap = parseTestLog(content, { parser, ref: semantics === 'strict' ? 'main' : 'v4.1.0' });
  } catch {
    // An unparseable log is the patch's output: nothing passed.
    statusMap = {};
  }
  if (content !== null) flags.push(...resultsAfterSummary(content), ...exitCodeMismatch(exitCode, statusMap));
  let report = gradeReport(
    {
      statusMap: gradingStatusMap(statusMap, grader.passToPass, semantics),
      failToPass: grader.failToPass,
      passToPass: grader.passToPass,
    },
    { semantics: semantics === 'strict' ? 'swebench-main' : 'swesmith', evalType },
  );
  if (semantics === 'strict' && flags.some((f) => f.kind === 'exit_code_mismatch')) {
    report = { tests_status: report.tests_status, resolution: 'RESOLVED_NO' };
  }
  const settled = settle(report, flags, onSuspicious, true);
  return {
    status: 'graded',
    ...settled.report,
    outcome: settled.outcome,
    reward: settled.reward,
    semantics,
    statusMap,
    channel: 'log',
    canaries: [],
    patch,
    exitCode,
    flags,
    hacks: settled.hacks,
    durationMs: performance.now() - started,
    ...base,
  };
}
