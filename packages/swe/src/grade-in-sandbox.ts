/**
 * Grading a patch in a sandbox that never ran the agent: check the instance out there, check the
 * environment (runner present, disk space, test files in place) — only these checks can end in an
 * infrastructure error — then apply the patch with SWE-smith's fallbacks, put the hidden tests back,
 * look for hacks, hide the history, run the test command between markers, parse and grade. Whatever goes
 * wrong once the patch is in is the patch's doing and scores 0 with its outcome named, so an agent cannot
 * turn its own failure into an excused infrastructure error.
 */
import { errorMarker, GradingError, hasErrorMarker, SandboxError, type TaskSpec } from '@vime/core';
import { shellJoin } from '@vime/core/utils';
import { execDetached, type Sandbox } from '@vime/sandbox';
import {
  exitCodeMismatch,
  type HackFlag,
  type HackPolicy,
  patchHacks,
  resultsAfterSummary,
  SUSPICIOUS,
  scanTranscript,
} from './antihack.js';
import type { CapturedPatch, CaptureFailure } from './capture.js';
import { type GradeReport, gradeReport, MARKERS, readTestOutput, recordedExitCode } from './eval-report.js';
import { evalScript } from './eval-script.js';
import { sh, shOk } from './git.js';
import { type ParserId, parseTestLog } from './parsers/index.js';
import type { StatusMap } from './parsers/types.js';
import { sandboxHacks } from './probe.js';
import { agentSandboxes, checkoutInstance, hideHistory, taskTestFileSets } from './setup.js';

/** SWE-smith's `GIT_APPLY_CMDS`, tried in order. */
export const APPLY_COMMANDS = [
  'git apply --verbose',
  'git apply --verbose --reject',
  'patch --batch --fuzz=5 -p1 -i',
] as const;

/** The grading timeout of the reference setup (`AGENT_EVAL_TIMEOUT_SEC=900`). */
export const DEFAULT_GRADE_TIMEOUT_MS = 900_000;

/** Where grading keeps its scratch files: inside `.git`, so they never show up as changes. */
const PATCH_FILE = '.git/vime-grade.diff';
const EVAL_FILE = '.git/vime-eval.sh';

/** Decided before the patch is applied, so never the agent's doing. */
export type InfraReason =
  | 'setup_failed'
  | 'missing_test_file'
  | 'disk_full'
  | 'runner_missing'
  | 'sandbox_lost';

/** How a grade came about. Everything but `tests_ran` is a failure of the patch (reward 0). */
export type GradeOutcome =
  | 'tests_ran'
  | 'patch_apply_failed'
  | 'patch_too_large'
  | 'repository_broken'
  | 'eval_timeout'
  | 'tests_cut_short'
  | 'grading_broken'
  | 'hack_detected';

/** A grade that could not be made, for an infrastructure reason: never a reward. */
export interface InfraError {
  status: 'infra_error';
  reason: InfraReason;
  message: string;
  patch?: string | undefined;
  log?: string | undefined;
}

/** A patch graded in a fresh sandbox: its outcome, reward and hacks. */
export interface Graded extends GradeReport {
  status: 'graded';
  outcome: GradeOutcome;
  /** 1 iff RESOLVED_FULL and no hack under the `zero` policy; 0 otherwise. */
  reward: 0 | 1;
  semantics: 'swesmith' | 'strict';
  statusMap: StatusMap;
  patch: string;
  /** Which of `APPLY_COMMANDS` took the patch (null for an empty patch or when none did). */
  appliedWith: string | null;
  exitCode: number | undefined;
  timedOut: boolean;
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
   * `swesmith` (default): SWE-smith/SWE-bench v4.1.0 parity, the reward SWE-smith training used.
   * `strict`: SWE-bench main (a skipped F2P test fails, truncated ids match by prefix), and the test
   * command's exit code must agree with the parsed results.
   */
  semantics?: 'swesmith' | 'strict' | undefined;
  evalType?: 'pass_and_fail' | 'fail_only' | undefined;
  /** Test run timeout (default 900 s); a timeout grades 0 with outcome `eval_timeout`. */
  timeoutMs?: number | undefined;
  /** Setup command timeout and retries in the grading sandbox. */
  setupTimeoutMs?: number | undefined;
  /** Parser (default: the task's grader parser, else `swesmith:<repo>`). */
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

const sandboxLostMarker = errorMarker('GradingSandboxLost');

/** Thrown when the grading sandbox stops answering after the patch is in; `gradeInFreshSandbox` decides whose fault. */
export class GradingSandboxLost extends GradingError {
  readonly [sandboxLostMarker] = true;
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, options);
  }

  /** Whether `value` is a `GradingSandboxLost`, from any copy of this package. */
  static override isInstance(value: unknown): value is GradingSandboxLost {
    return hasErrorMarker(value, sandboxLostMarker);
  }
}

const infra = (reason: InfraReason, message: string, extra: Partial<InfraError> = {}): InfraError => ({
  status: 'infra_error',
  reason,
  message,
  ...extra,
});

/** Zero for a patch that failed before its tests could count. */
function failedPatch(
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

function emptyStatus(): GradeReport['tests_status'] {
  const bucket = () => ({ success: [], failure: [] });
  return { FAIL_TO_PASS: bucket(), PASS_TO_PASS: bucket(), FAIL_TO_FAIL: bucket(), PASS_TO_FAIL: bucket() };
}

const hackKinds = (flags: readonly HackFlag[]) => [
  ...new Set(flags.filter((f) => SUSPICIOUS.has(f.kind)).map((f) => f.kind)),
];

/** The environment checks that make a failure an infrastructure error; run before any patch is applied. */
export async function gradingPreflight(
  sandbox: Sandbox,
  task: TaskSpec,
  options: Pick<GradeSweOptions, 'signal' | 'minFreeBytes' | 'setupTimeoutMs'> = {},
): Promise<{ testsCommit: string } | InfraError> {
  const { signal, minFreeBytes = 64 << 20 } = options;
  let testsCommit: string;
  try {
    ({ testsCommit } = await checkoutInstance(sandbox, task, { signal, timeoutMs: options.setupTimeoutMs }));
    await shOk(sandbox, `git checkout -q -f ${testsCommit}`, 'checking out the tests-present commit', {
      signal,
    });
  } catch (error) {
    if (signal?.aborted) throw error;
    return infra(
      'setup_failed',
      `the instance could not be checked out for grading: ${(error as Error).message}`,
    );
  }
  const { failToPass, passToPass } = taskTestFileSets(task);
  const files = [...new Set([...failToPass, ...passToPass])];
  if (files.length > 0) {
    const missing = await sh(
      sandbox,
      `for f in ${shellJoin(files)}; do git cat-file -e "${testsCommit}:$f" 2>/dev/null || echo "$f"; done`,
      { signal },
    );
    const absent = missing.stdout.split('\n').filter(Boolean);
    if (absent.length > 0) {
      return infra(
        'missing_test_file',
        `test file(s) named by the task are absent at ${testsCommit}: ${absent.join(', ')}`,
      );
    }
  }
  const df = await sh(sandbox, "df -Pk . | awk 'NR==2 {print $4}'", { signal });
  const freeKb = Number(df.stdout.trim());
  if (Number.isFinite(freeKb) && df.stdout.trim() !== '' && freeKb * 1024 < minFreeBytes) {
    return infra('disk_full', `only ${Math.round(freeKb / 1024)} MiB free in the grading sandbox's work dir`);
  }
  const probe = runnerProbe(task.testCommand ?? '');
  if (probe) {
    const r = await sh(sandbox, probe, { signal, timeoutMs: 120_000 });
    if (r.exitCode !== 0) {
      return infra(
        'runner_missing',
        `the test runner does not start in the grading sandbox (${probe}): ${r.output.trim().slice(-600)}`,
      );
    }
  }
  return { testsCommit };
}

/** A command that proves the runner starts (pytest: the test command with `--version`). */
function runnerProbe(testCommand: string): string | undefined {
  return /\bpytest\b/.test(testCommand) ? `${testCommand} --version` : undefined;
}

/**
 * Grade a captured patch in `sandbox`, which must be fresh: created from the task's image and never given
 * to the agent (grading in an agent's sandbox throws unless `allowAgentSandbox`).
 */
export async function gradeSweTask(
  sandbox: Sandbox,
  task: TaskSpec,
  captured: CapturedPatch | CaptureFailure,
  options: GradeSweOptions = {},
): Promise<SweGradeResult> {
  const started = performance.now();
  const { semantics = 'swesmith', evalType = 'pass_and_fail', onSuspicious = 'zero', signal } = options;
  const timeoutMs = options.timeoutMs ?? DEFAULT_GRADE_TIMEOUT_MS;
  if (agentSandboxes.has(sandbox) && !options.allowAgentSandbox) {
    throw new GradingError(
      `sandbox ${sandbox.id} ran the agent of ${task.id}: grade in a fresh sandbox (gradeInFreshSandbox), where nothing the agent left behind can act`,
    );
  }
  if (task.grader.kind !== 'swesmith')
    throw new GradingError(`task ${task.id} has grader ${task.grader.kind}, not swesmith`);
  if (!task.testCommand)
    throw new GradingError(`task ${task.id} has no testCommand; rowToTask sets it from the repo profile`);
  const transcriptFlags = scanTranscript(options.transcript ?? []);
  if ('failed' in captured)
    return failedPatch(captured.reason, '', transcriptFlags, started, { log: captured.message });

  const checked = await gradingPreflight(sandbox, task, options);
  if ('status' in checked) return { ...checked, patch: captured.patch };
  const { testsCommit } = checked;
  const { failToPass } = taskTestFileSets(task);
  const flags = [...transcriptFlags, ...patchHacks(captured, failToPass)];
  const op = signal ? { signal } : {};
  try {
    let appliedWith: string | null = null;
    if (captured.patch.trim()) {
      await sandbox.writeFile(PATCH_FILE, captured.patch, op);
      const attempts: string[] = [];
      for (const command of APPLY_COMMANDS) {
        const r = await sh(sandbox, `${command} ${PATCH_FILE}`, { signal });
        if (r.exitCode === 0) {
          appliedWith = command;
          break;
        }
        attempts.push(`${command}: ${r.output.trim().slice(-400)}`);
        // A failed `--reject`/`patch` may leave partial changes: start the next attempt from a clean tree.
        await sh(sandbox, `git reset -q --hard ${testsCommit} && git clean -fdq`, { signal });
      }
      if (appliedWith === null) {
        return failedPatch('patch_apply_failed', captured.patch, flags, started, {
          log: `${MARKERS.applyFailed}: no apply command took the patch\n${attempts.join('\n')}`,
        });
      }
    }
    // The hidden tests exactly as at the tests-present commit, whatever the patch did to them.
    const testFiles = [...new Set([...failToPass, ...taskTestFileSets(task).passToPass])];
    if (testFiles.length > 0) {
      await shOk(
        sandbox,
        `git checkout -q ${testsCommit} -- ${shellJoin(testFiles)}`,
        'restoring the test files',
        { signal },
      );
    }
    const tests = new Set(testFiles);
    const added = captured.changedFiles.filter((f) => !tests.has(f) && !captured.deletedFiles.includes(f));
    const newFiles = await sh(sandbox, `git ls-files --others --exclude-standard -z`, { signal });
    const untracked = new Set(newFiles.stdout.split('\0').filter(Boolean));
    flags.push(
      ...(await sandboxHacks(
        sandbox,
        { added: added.filter((f) => untracked.has(f)), changed: added.filter((f) => !untracked.has(f)) },
        { signal },
      )),
    );
    // Nothing of the fix is left in `.git` for code running under the tests to read.
    await hideHistory(sandbox, 'Grading state', signal);
    await sandbox.writeFile(
      EVAL_FILE,
      evalScript({ workdir: sandbox.workdir, testCommand: task.testCommand }),
      op,
    );
    const result = await execDetached(sandbox, `bash ${EVAL_FILE} 2>&1`, {
      timeoutMs,
      maxOutputBytes: 8 << 20,
      ...op,
    });
    const log = result.timedOut
      ? `${result.output}\n${MARKERS.timedOut}: ${Math.round(timeoutMs / 1000)} seconds exceeded\n`
      : result.output;
    const base = { log, appliedWith, timedOut: result.timedOut, semantics };
    if (result.timedOut) return failedPatch('eval_timeout', captured.patch, flags, started, base);
    if (result.exitCode === null || !(log.includes(MARKERS.start) && log.includes(MARKERS.end))) {
      return failedPatch('tests_cut_short', captured.patch, flags, started, base);
    }
    return finish(
      task,
      captured.patch,
      flags,
      started,
      { ...options, semantics, evalType, onSuspicious },
      base,
    );
  } catch (error) {
    if (signal?.aborted) throw error;
    if (SandboxError.isInstance(error) || GradingError.isInstance(error)) {
      throw new GradingSandboxLost(
        `the grading sandbox ${sandbox.id} failed after the patch was applied: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
    throw error;
  }
}

function finish(
  task: TaskSpec,
  patch: string,
  flags: HackFlag[],
  started: number,
  options: GradeSweOptions & { semantics: 'swesmith' | 'strict'; onSuspicious: HackPolicy },
  base: { log: string; appliedWith: string | null; timedOut: boolean },
): Graded {
  const { semantics, evalType = 'pass_and_fail', onSuspicious } = options;
  const grader = task.grader as Extract<TaskSpec['grader'], { kind: 'swesmith' }>;
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
    { statusMap, failToPass: grader.failToPass, passToPass: grader.passToPass },
    { semantics: semantics === 'strict' ? 'swebench-main' : 'swesmith', evalType },
  );
  if (semantics === 'strict' && flags.some((f) => f.kind === 'exit_code_mismatch')) {
    report = { tests_status: report.tests_status, resolution: 'RESOLVED_NO' };
  }
  const hacks = hackKinds(flags);
  const zeroed = hacks.length > 0 && onSuspicious === 'zero';
  if (zeroed) report = { tests_status: report.tests_status, resolution: 'RESOLVED_NO' };
  return {
    status: 'graded',
    ...report,
    outcome: zeroed ? 'hack_detected' : 'tests_ran',
    reward: report.resolution === 'RESOLVED_FULL' ? 1 : 0,
    semantics,
    statusMap,
    patch,
    exitCode,
    flags,
    hacks,
    durationMs: performance.now() - started,
    ...base,
  };
}

/** Where grading sandboxes come from (`SwePools`, or anything that hands out fresh sandboxes of a task's image). */
export interface SandboxSource {
  /** Claim a sandbox of the task's image. */
  claim(task: TaskSpec, options?: { signal?: AbortSignal | undefined }): Promise<Sandbox>;
  /** Give a sandbox back. */
  release(sandbox: Sandbox): Promise<void>;
}

/**
 * Claim a fresh sandbox of the task's image and grade the patch there. When that sandbox stops answering
 * once the patch is in, a second fresh sandbox runs the pre-patch checks: if they pass, the environment
 * is sound and the patch broke its grading (0, `grading_broken`); if they fail, it is an infrastructure
 * error.
 */
export async function gradeInFreshSandbox(
  source: SandboxSource,
  task: TaskSpec,
  captured: CapturedPatch | CaptureFailure,
  options: Omit<GradeSweOptions, 'allowAgentSandbox'> = {},
): Promise<SweGradeResult> {
  const started = performance.now();
  const { signal } = options;
  if ('failed' in captured) return gradeSweTaskWithout(task, captured, options, started);
  const sandbox = await source.claim(task, { signal });
  try {
    return await gradeSweTask(sandbox, task, captured, options);
  } catch (error) {
    if (!(error instanceof GradingSandboxLost)) throw error;
    const check = await source.claim(task, { signal });
    try {
      const sound = await gradingPreflight(check, task, options);
      if ('status' in sound)
        return { ...sound, reason: 'sandbox_lost', message: `${error.message}; then: ${sound.message}` };
    } finally {
      await source.release(check);
    }
    const flags = [
      ...scanTranscript(options.transcript ?? []),
      ...patchHacks(captured, taskTestFileSets(task).failToPass),
    ];
    return failedPatch('grading_broken', captured.patch, flags, started, { log: error.message });
  } finally {
    await source.release(sandbox);
  }
}

/** A capture that failed grades 0 without a sandbox. */
function gradeSweTaskWithout(
  task: TaskSpec,
  captured: CaptureFailure,
  options: GradeSweOptions,
  started: number,
): Graded {
  void task;
  return failedPatch(captured.reason, '', scanTranscript(options.transcript ?? []), started, {
    log: captured.message,
  });
}
