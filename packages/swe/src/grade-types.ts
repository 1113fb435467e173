/** The shapes of a grade: what grading returns and the options it takes. */
import type { HackFlag, HackPolicy } from './antihack.js';
import type { GradeReport } from './eval-report.js';
import type { CanaryVerdict } from './grade-verdict.js';
import type { ParserId } from './parsers/index.js';
import type { StatusMap } from './parsers/types.js';

/** SWE-smith's `GIT_APPLY_CMDS`, tried in order. */
export const APPLY_COMMANDS = [
  'git apply --verbose',
  'git apply --verbose --reject',
  'patch --batch --fuzz=5 -p1 -i',
] as const;

/** The grading timeout of the reference setup (`AGENT_EVAL_TIMEOUT_SEC=900`). */
export const DEFAULT_GRADE_TIMEOUT_MS = 900_000;

/**
 * Why a rollout could not be graded: decided before the patch is applied (the environment), or
 * `ungradable` (the grader's own checks could not run: the in-sandbox probe erred or timed out, the
 * grader's runner failed). Never the agent's doing, never a reward of 0.
 */
export type InfraReason =
  | 'setup_failed'
  | 'missing_test_file'
  | 'disk_full'
  | 'runner_missing'
  | 'sandbox_lost'
  | 'ungradable';

/** How a grade came about. Everything but `tests_ran` is a failure of the patch (reward 0). */
export type GradeOutcome =
  | 'tests_ran'
  | 'patch_apply_failed'
  | 'patch_too_large'
  | 'repository_broken'
  | 'eval_timeout'
  | 'tests_cut_short'
  | 'grading_broken'
  | 'hack_detected'
  /** The run's outcomes were rewritten (a canary misbehaved, a report contradicts its call, …): see `flags`. */
  | 'tampered';

/** A grade that could not be made, for an infrastructure reason: never a reward. */
export interface InfraError {
  status: 'infra_error';
  reason: InfraReason;
  message: string;
  patch?: string | undefined;
  log?: string | undefined;
}

export interface Graded extends GradeReport {
  status: 'graded';
  outcome: GradeOutcome;
  /** 1 iff RESOLVED_FULL and no hack under the `zero` policy; 0 otherwise. */
  reward: 0 | 1;
  semantics: 'swesmith' | 'strict';
  /**
   * Test id → status as the grader saw it (`PASSED`, `FAILED`, `ERROR`, `SKIPPED`, `XFAIL`, `XPASS`): from
   * the grader's report channel for pytest runs, from the parsed log otherwise.
   */
  statusMap: StatusMap;
  /** Where the outcomes came from: the grader's `report` channel (pytest), or the test `log` (other runners). */
  channel: 'report' | 'log';
  /** The canary tests of the run and what became of each (pytest runs). */
  canaries: CanaryVerdict[];
  patch: string;
  /** Which of `APPLY_COMMANDS` took the patch (null for an empty patch or when none did). */
  appliedWith: string | null;
  /** The test process's exit code, from the process (a `report` run) or the eval script's record (`log`). */
  exitCode: number | undefined;
  timedOut: boolean;
  /** The test output, for humans (never the source of a `report` run's outcomes). */
  log: string;
  /** Every check that fired, informational ones included. */
  flags: HackFlag[];
  /** The suspicious kinds among `flags`, once each: what the run counts. */
  hacks: HackFlag['kind'][];
  durationMs: number;
}

/** What grading a patch gave: a grade, or an infrastructure error. */
export type SweGradeResult = Graded | InfraError;

/** Options of `gradeInFreshSandbox`. */
export interface GradeSweOptions {
  /**
   * `swesmith` (default): SWE-smith/SWE-bench v4.1.0 rules, the reward SWE-smith training used, except that
   * only a pass passes (README). `strict`: SWE-bench main (truncated ids match by prefix, a skipped P2P test
   * is maintained).
   */
  semantics?: 'swesmith' | 'strict' | undefined;
  evalType?: 'pass_and_fail' | 'fail_only' | undefined;
  /** Test run timeout (default 900 s); a timeout grades 0 with outcome `eval_timeout`. */
  timeoutMs?: number | undefined;
  /** Setup command timeout and retries in the grading sandbox. */
  setupTimeoutMs?: number | undefined;
  /** Parser (default: the task's grader parser, else `swesmith:<repo>`), for runs graded from their log. */
  parser?: ParserId | undefined;
  /** The agent's shell commands, scanned for reads of history. */
  transcript?: readonly string[] | undefined;
  /** What a detected hack does (default `zero`). */
  onSuspicious?: HackPolicy | undefined;
  /** Free space the grader requires in the work dir before the run (default 64 MiB). */
  minFreeBytes?: number | undefined;
  /** Grade in a sandbox the agent ran in. Only for measurements; never right for training. */
  allowAgentSandbox?: boolean | undefined;
  signal?: AbortSignal | undefined;
}
