/**
 * Grading a patch in a sandbox that never ran the agent: check the instance out there, check the
 * environment (runner present, disk space, test files in place) and read what grading needs from the
 * tests-present commit — only these can end in an infrastructure error, with the grader's own failures
 * (`ungradable`) — then apply the patch with SWE-smith's fallbacks, put the hidden tests back, look for
 * hacks, hide the history and run the tests. A pytest run goes through the grader's runner, whose report
 * channel the code under test cannot write; other runners are graded from their log. Whatever goes wrong
 * once the patch is in is the patch's doing and scores 0 with its outcome named, so an agent cannot turn
 * its own failure into an excused infrastructure error.
 */
import { errorMarker, GradingError, hasErrorMarker, SandboxError, type TaskSpec } from '@vime/core';
import { shellJoin } from '@vime/core/utils';
import { BACKEND_LOST, execDetached, type Sandbox } from '@vime/sandbox';
import { type HackFlag, patchHacks, scanTranscript } from './antihack.js';
import type { CapturedPatch, CaptureFailure } from './capture.js';
import { MARKERS } from './eval-report.js';
import { evalScript } from './eval-script.js';
import { sh, shOk } from './git.js';
import {
  type FinishOptions,
  failedPatch,
  finishFromFrame,
  finishFromLog,
  hackKinds,
  infra,
} from './grade-result.js';
import { type PristineState, readPristine, runWithChannel, wrapPytestCommand } from './grade-run.js';
import {
  APPLY_COMMANDS,
  DEFAULT_GRADE_TIMEOUT_MS,
  type GradeSweOptions,
  type InfraError,
  type SweGradeResult,
} from './grade-types.js';
import { ProbeError, sandboxHacks } from './probe.js';
import { agentSandboxes, checkoutInstance, hideHistory, taskTestFileSets } from './setup.js';

/** Where grading keeps its scratch files: inside `.git`, so they never show up as changes. */
const PATCH_FILE = '.git/vime-grade.diff';
const EVAL_FILE = '.git/vime-eval.sh';

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

/** Apply the patch with SWE-smith's fallbacks: the command that took it, or the log of every attempt. */
async function applyPatch(
  sandbox: Sandbox,
  patch: string,
  testsCommit: string,
  signal: AbortSignal | undefined,
): Promise<{ appliedWith: string | null } | { failed: string }> {
  if (!patch.trim()) return { appliedWith: null };
  await sandbox.writeFile(PATCH_FILE, patch, signal ? { signal } : {});
  const attempts: string[] = [];
  for (const command of APPLY_COMMANDS) {
    const r = await sh(sandbox, `${command} ${PATCH_FILE}`, { signal });
    if (r.exitCode === 0) return { appliedWith: command };
    attempts.push(`${command}: ${r.output.trim().slice(-400)}`);
    // A failed `--reject`/`patch` may leave partial changes: start the next attempt from a clean tree.
    await sh(sandbox, `git reset -q --hard ${testsCommit} && git clean -fdq`, { signal });
  }
  return { failed: `${MARKERS.applyFailed}: no apply command took the patch\n${attempts.join('\n')}` };
}

/** Put the hidden tests back exactly as at the tests-present commit, then run the in-sandbox probe. */
async function restoreAndProbe(
  sandbox: Sandbox,
  task: TaskSpec,
  captured: CapturedPatch,
  testsCommit: string,
  signal: AbortSignal | undefined,
): Promise<HackFlag[]> {
  const { failToPass, passToPass } = taskTestFileSets(task);
  const testFiles = [...new Set([...failToPass, ...passToPass])];
  if (testFiles.length > 0) {
    await shOk(
      sandbox,
      `git checkout -q ${testsCommit} -- ${shellJoin(testFiles)}`,
      'restoring the test files',
      {
        signal,
      },
    );
  }
  const tests = new Set(testFiles);
  const added = captured.changedFiles.filter((f) => !tests.has(f) && !captured.deletedFiles.includes(f));
  const newFiles = await sh(sandbox, `git ls-files --others --exclude-standard -z`, { signal });
  const untracked = new Set(newFiles.stdout.split('\0').filter(Boolean));
  return sandboxHacks(
    sandbox,
    { added: added.filter((f) => untracked.has(f)), changed: added.filter((f) => !untracked.has(f)) },
    { signal },
  );
}

/** The hidden test files, each with its F2P tests named relative to it. */
function hiddenTests(task: TaskSpec): Array<{ path: string; f2p: string[] }> {
  const { failToPass, passToPass } = taskTestFileSets(task);
  const grader = task.grader as Extract<TaskSpec['grader'], { kind: 'swesmith' }>;
  return [...new Set([...failToPass, ...passToPass])]
    .filter((path) => path.endsWith('.py'))
    .map((path) => ({
      path,
      f2p: grader.failToPass
        .filter((id) => id.startsWith(`${path}::`))
        .map((id) => id.slice(path.length + 2)),
    }));
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
  const { semantics = 'swesmith', onSuspicious = 'zero', signal } = options;
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
  let pristine: PristineState | undefined;
  if (wrapPytestCommand(task.testCommand, 'runner', 'spec') !== undefined) {
    try {
      pristine = await readPristine(sandbox, testsCommit, task.testCommand, signal);
    } catch (error) {
      if (signal?.aborted) throw error;
      return infra('setup_failed', `the tests-present commit could not be read: ${(error as Error).message}`);
    }
  }
  const flags = [...transcriptFlags, ...patchHacks(captured, taskTestFileSets(task).failToPass)];
  const finish: FinishOptions = { ...options, semantics, onSuspicious };
  try {
    const applied = await applyPatch(sandbox, captured.patch, testsCommit, signal);
    if ('failed' in applied)
      return failedPatch('patch_apply_failed', captured.patch, flags, started, { log: applied.failed });
    try {
      flags.push(...(await restoreAndProbe(sandbox, task, captured, testsCommit, signal)));
    } catch (error) {
      if (!ProbeError.isInstance(error)) throw error;
      return infra('ungradable', error.message, { patch: captured.patch });
    }
    // Nothing of the fix is left in `.git` for code running under the tests to read.
    await hideHistory(sandbox, 'Grading state', signal);
    const run: RunContext = {
      sandbox,
      task,
      captured,
      flags,
      started,
      options: finish,
      appliedWith: applied.appliedWith,
    };
    return pristine ? await runReported(run, pristine) : await runLogged(run);
  } catch (error) {
    if (signal?.aborted) throw error;
    // Its whole backend went away (a fleet engine stopped): nothing the patch did, and a check sandbox on
    // another backend would pass and make it a 0. An infrastructure failure as it is.
    if (SandboxError.isInstance(error) && error.code === BACKEND_LOST) throw error;
    if (SandboxError.isInstance(error) || GradingError.isInstance(error)) {
      throw new GradingSandboxLost(
        `the grading sandbox ${sandbox.id} failed after the patch was applied: ${(error as Error).message}`,
        { cause: error },
      );
    }
    throw error;
  }
}

/** What the test run of one grading needs, once the patch is in. */
interface RunContext {
  sandbox: Sandbox;
  task: TaskSpec;
  captured: CapturedPatch;
  flags: HackFlag[];
  started: number;
  options: FinishOptions;
  appliedWith: string | null;
}

/** A pytest run through the grader's runner and report channel. */
async function runReported(ctx: RunContext, pristine: PristineState): Promise<SweGradeResult> {
  const { sandbox, task, flags, started, options, appliedWith } = ctx;
  const patch = ctx.captured.patch;
  const timeoutMs = options.timeoutMs ?? DEFAULT_GRADE_TIMEOUT_MS;
  const grader = task.grader as Extract<TaskSpec['grader'], { kind: 'swesmith' }>;
  const run = await runWithChannel(sandbox, {
    workdir: sandbox.workdir,
    testCommand: task.testCommand!,
    hidden: hiddenTests(task),
    wanted: [...grader.failToPass, ...grader.passToPass],
    changed: ctx.captured.changedFiles.filter((f) => !ctx.captured.deletedFiles.includes(f)),
    pristine,
    timeoutMs,
    signal: options.signal,
  });
  const base = {
    appliedWith,
    timedOut: run.kind === 'timeout',
    semantics: options.semantics,
    channel: 'report' as const,
  };
  if (run.kind === 'runner_failed') {
    // The grader's own failure, unless the patch was already caught at something that can cause it.
    if (hackKinds(flags).length === 0) return infra('ungradable', run.message, { patch });
    return failedPatch('tests_cut_short', patch, flags, started, { ...base, log: run.message });
  }
  if (run.kind === 'timeout') {
    const log = `${run.output}\n${MARKERS.timedOut}: ${Math.round(timeoutMs / 1000)} seconds exceeded\n`;
    return failedPatch('eval_timeout', patch, flags, started, { ...base, log });
  }
  if (run.kind === 'cut_short')
    return failedPatch('tests_cut_short', patch, flags, started, { ...base, log: run.output });
  return finishFromFrame(
    task,
    patch,
    flags,
    started,
    options,
    { log: run.frame.log, appliedWith, timedOut: false },
    run.frame,
  );
}

/** Another runner: SWE-smith's eval script between markers, graded from its log. */
async function runLogged(ctx: RunContext): Promise<SweGradeResult> {
  const { sandbox, task, flags, started, options, appliedWith } = ctx;
  const patch = ctx.captured.patch;
  const timeoutMs = options.timeoutMs ?? DEFAULT_GRADE_TIMEOUT_MS;
  const op = options.signal ? { signal: options.signal } : {};
  await sandbox.writeFile(
    EVAL_FILE,
    evalScript({ workdir: sandbox.workdir, testCommand: task.testCommand! }),
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
  const base = { log, appliedWith, timedOut: result.timedOut, semantics: options.semantics };
  if (result.timedOut) return failedPatch('eval_timeout', patch, flags, started, base);
  if (result.exitCode === null || !(log.includes(MARKERS.start) && log.includes(MARKERS.end))) {
    return failedPatch('tests_cut_short', patch, flags, started, base);
  }
  return finishFromLog(task, patch, flags, started, options, base);
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
  if ('failed' in captured) {
    return failedPatch(captured.reason, '', scanTranscript(options.transcript ?? []), started, {
      log: captured.message,
    });
  }
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
