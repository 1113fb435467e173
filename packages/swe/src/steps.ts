/**
 * The SWE-smith steps that run inside a sandbox: set up the buggy state, capture the agent's patch, return
 * to the tests-present commit, apply the patch with SWE-smith's fallbacks, restore the hidden test files,
 * run the test command between markers, parse and grade. Infrastructure failures come back as
 * `{ status: 'infra_error' }`, never as a reward of 0.
 */
import { GradingError, SandboxError, shellJoin, shellQuote, type TaskSpec } from '@vime/core';
import { type ExecResult, execDetached, runSetup, type Sandbox, stageFiles } from '@vime/sandbox';
import {
  exitCodeMismatch,
  type HackFlag,
  type HackPolicy,
  resultsAfterSummary,
  SUSPICIOUS,
  scanTranscript,
  testConfigChanges,
} from './antihack.js';
import { evalScript } from './eval-script.js';
import {
  type GradeReport,
  gradeReport,
  MARKERS,
  readTestOutput,
  recordedExitCode,
  type TestsStatus,
} from './grading.js';
import { REMOVE_TESTS_SUBJECT } from './layout.js';
import { type ParserId, parseTestLog } from './parsers/index.js';
import type { StatusMap } from './parsers/types.js';
import { pythonTestFiles } from './profiles.js';

/** git inside the sandbox: the work dir may belong to another uid than the one running git. */
const GIT_ENV: Record<string, string> = {
  GIT_CONFIG_COUNT: '2',
  GIT_CONFIG_KEY_0: 'safe.directory',
  GIT_CONFIG_VALUE_0: '*',
  GIT_CONFIG_KEY_1: 'core.quotepath',
  GIT_CONFIG_VALUE_1: 'false',
  GIT_TERMINAL_PROMPT: '0',
  GIT_AUTHOR_NAME: 'vime',
  GIT_AUTHOR_EMAIL: 'task@vime.invalid',
  GIT_COMMITTER_NAME: 'vime',
  GIT_COMMITTER_EMAIL: 'task@vime.invalid',
};

/** SWE-smith's `GIT_APPLY_CMDS`, tried in order. */
export const APPLY_COMMANDS = [
  'git apply --verbose',
  'git apply --verbose --reject',
  'patch --batch --fuzz=5 -p1 -i',
] as const;

/** Where grading keeps its scratch files: inside `.git`, so they never show up as changes. */
const PATCH_FILE = '.git/vime-grade.diff';
const EVAL_FILE = '.git/vime-eval.sh';

export interface SweSession {
  sandbox: Sandbox;
  task: TaskSpec;
  /** The commit the agent starts from (tests removed). */
  startCommit: string;
  /** The commit with every test present (`HEAD~1` of the instance branch); equal to `startCommit` when history is hidden. */
  testsCommit: string;
  historyHidden: boolean;
  /** F2P and P2P test files, restored before the test run. */
  testFiles: string[];
  /** Their content at the tests-present commit (`null`: absent there, which grading reports). */
  snapshot: Map<string, Uint8Array | null>;
}

export interface SetupSweOptions {
  /** Extra attempts of the setup command on transient failures (default 2). */
  retries?: number;
  /** Setup command timeout (default 120 s). */
  timeoutMs?: number;
  /**
   * Replace the repository's history by a single commit of the task's start state, so nothing beyond it
   * (the clean code, the bug patch, the removed tests) can be read from `.git` (default false).
   */
  hideHistory?: boolean;
  signal?: AbortSignal;
}

async function run(
  sandbox: Sandbox,
  command: string,
  signal: AbortSignal | undefined,
  timeoutMs = 120_000,
): Promise<ExecResult> {
  return sandbox.exec(command, { env: GIT_ENV, timeoutMs, ...(signal ? { signal } : {}) });
}

async function runOk(
  sandbox: Sandbox,
  command: string,
  what: string,
  signal?: AbortSignal,
  timeoutMs?: number,
): Promise<string> {
  const r = await run(sandbox, command, signal, timeoutMs);
  if (r.exitCode !== 0 || r.timedOut) {
    throw new SandboxError(
      `${what} failed in sandbox ${sandbox.id} (exit ${r.exitCode}${r.timedOut ? ', timed out' : ''}): ${r.output.trim().slice(-1500)}`,
      { code: 'swe_step_failed', data: { command, exitCode: r.exitCode, timedOut: r.timedOut } },
    );
  }
  return r.stdout;
}

function fromBase64(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text.trim(), 'base64'));
}

/**
 * F2P and P2P test files of a task, `[f2p, p2p]`: from its metadata when `rowToTask` recorded them (the repo
 * profile's rule), else the Python rule (the part of each id before `::`).
 */
export function taskTestFileSets(task: TaskSpec): [string[], string[]] {
  if (task.grader.kind !== 'swesmith') {
    throw new GradingError(`task ${task.id} has grader ${task.grader.kind}, not swesmith`);
  }
  const recorded = task.metadata.test_files as
    | { FAIL_TO_PASS?: string[]; PASS_TO_PASS?: string[] }
    | undefined;
  if (recorded?.FAIL_TO_PASS) return [recorded.FAIL_TO_PASS, recorded.PASS_TO_PASS ?? []];
  return pythonTestFiles({ FAIL_TO_PASS: task.grader.failToPass, PASS_TO_PASS: task.grader.passToPass });
}

/** Every F2P/P2P test file of a task, sorted and unique: what grading restores. */
export function taskTestFiles(task: TaskSpec): string[] {
  const [f2p, p2p] = taskTestFileSets(task);
  return [...new Set([...f2p, ...p2p])].sort();
}

/** Read files at a commit in one exec: one line per file, base64 content or `-` when absent there. */
async function snapshotFiles(
  sandbox: Sandbox,
  commit: string,
  files: readonly string[],
  signal?: AbortSignal,
): Promise<Map<string, Uint8Array | null>> {
  const snapshot = new Map<string, Uint8Array | null>();
  if (files.length === 0) return snapshot;
  const script = `for f in ${shellJoin(files)}; do if git cat-file -e "${commit}:$f" 2>/dev/null; then git cat-file blob "${commit}:$f" | base64 -w0; echo; else echo -; fi; done`;
  const lines = (await runOk(sandbox, script, 'reading the test files', signal)).split('\n');
  files.forEach((file, i) => {
    const line = lines[i] ?? '-';
    snapshot.set(file, line === '-' ? null : fromBase64(line));
  });
  return snapshot;
}

/**
 * Establish the buggy state: stage the task's files, run its setup command (checks out the instance branch)
 * with retries, make sure the F2P test files are absent at the start (committing their removal for rows
 * gathered before SWE-smith added that commit), record the tests-present commit and snapshot the test files.
 */
export async function setupSweTask(
  sandbox: Sandbox,
  task: TaskSpec,
  options: SetupSweOptions = {},
): Promise<SweSession> {
  const { retries = 2, timeoutMs = 120_000, hideHistory = false, signal } = options;
  const op = signal ? { signal } : {};
  await stageFiles(sandbox, task.files, op);
  if (task.setupCommand)
    await runSetup(sandbox, task.setupCommand, { retries, timeoutMs, env: GIT_ENV, ...op });
  const testFiles = taskTestFiles(task);
  const [f2pFiles] = taskTestFileSets(task);

  let start = (await runOk(sandbox, 'git rev-parse HEAD', 'reading the start commit', signal)).trim();
  const subject = (
    await runOk(sandbox, 'git log -1 --format=%s HEAD', 'reading the start commit', signal)
  ).trim();
  let tests: string;
  if (subject === REMOVE_TESTS_SUBJECT) {
    tests = (await runOk(sandbox, 'git rev-parse HEAD~1', 'reading the tests-present commit', signal)).trim();
  } else {
    // One-commit layout (rows gathered before mid-2025, or non-Python repos): the tests are at HEAD.
    tests = start;
    const present = f2pFiles.filter((f) => f);
    if (present.length > 0) {
      const quoted = shellJoin(present);
      await runOk(
        sandbox,
        `git rm -q --ignore-unmatch -- ${quoted} && (git diff --cached --quiet || git commit -q -m '${REMOVE_TESTS_SUBJECT}')`,
        'removing the F2P test files',
        signal,
      );
      start = (await runOk(sandbox, 'git rev-parse HEAD', 'reading the start commit', signal)).trim();
    }
  }

  const snapshot = await snapshotFiles(sandbox, tests, testFiles, signal);

  if (hideHistory) {
    await runOk(
      sandbox,
      "rm -rf .git && git init -q && git add -A && git commit -q --no-verify -m 'Task start'",
      'hiding the history',
      signal,
    );
    start = (await runOk(sandbox, 'git rev-parse HEAD', 'reading the start commit', signal)).trim();
    tests = start;
  }
  return {
    sandbox,
    task,
    startCommit: start,
    testsCommit: tests,
    historyHidden: hideHistory,
    testFiles,
    snapshot,
  };
}

export interface CapturedPatch {
  /** The agent's changes against the start commit (new files included, binary as git binary diffs), test files excluded. */
  patch: string;
  /** Every path the agent changed (test files included). */
  changedFiles: string[];
  /** F2P/P2P test files the agent changed; they are restored before the run, so those changes do not count. */
  changedTestFiles: string[];
}

/** Capture the agent's work as a patch against the task's start commit (`git add -A && git diff --cached`). */
export async function captureAgentPatch(
  session: SweSession,
  options: { signal?: AbortSignal } = {},
): Promise<CapturedPatch> {
  const { sandbox, startCommit, testFiles } = session;
  const names = await runOk(
    sandbox,
    `git add -A && git diff --cached --name-only --no-renames -z ${startCommit}`,
    'listing the agent changes',
    options.signal,
  );
  const changedFiles = names.split('\0').filter(Boolean);
  const changedTestFiles = changedFiles.filter((f) => testFiles.includes(f));
  const excludes = testFiles.map((f) => shellQuote(`:(exclude,literal)${f}`)).join(' ');
  const patch = await runOk(
    sandbox,
    `git diff --cached --binary --no-color --no-ext-diff --no-renames ${startCommit} -- . ${excludes}`,
    'capturing the agent patch',
    options.signal,
  );
  return { patch, changedFiles, changedTestFiles };
}

export type InfraReason =
  | 'capture_failed'
  | 'reset_failed'
  | 'patch_apply_failed'
  | 'missing_test_file'
  | 'disk_full'
  | 'runner_crashed'
  | 'test_command_not_found'
  | 'markers_missing'
  | 'parse_failed'
  | 'reward_hacking_suspected';

export interface InfraError {
  status: 'infra_error';
  reason: InfraReason;
  message: string;
  patch?: string;
  log?: string;
  flags: HackFlag[];
}

export interface Graded extends GradeReport {
  status: 'graded';
  /** 1 iff RESOLVED_FULL (SWE-smith's `resolved`); 0 otherwise. */
  reward: 0 | 1;
  semantics: 'swesmith' | 'strict';
  statusMap: StatusMap;
  patch: string;
  /** Which of `APPLY_COMMANDS` took the patch (null for an empty patch). */
  appliedWith: string | null;
  exitCode: number | undefined;
  timedOut: boolean;
  log: string;
  flags: HackFlag[];
  durationMs: number;
}

export type SweGradeResult = Graded | InfraError;

export interface GradeSweOptions {
  /**
   * `swesmith` (default): SWE-smith/SWE-bench v4.1.0 parity, the reward SWE-smith training used.
   * `strict`: SWE-bench main (a skipped F2P test fails, truncated ids match by prefix) and the test
   * command's exit code must agree with the parsed results.
   */
  semantics?: 'swesmith' | 'strict';
  evalType?: 'pass_and_fail' | 'fail_only';
  /** Test run timeout (default 90 s, SWE-smith's `timeout`); a timeout grades as unresolved, as upstream. */
  timeoutMs?: number;
  /** A patch captured earlier (default: capture now). */
  patch?: CapturedPatch;
  /** Parser (default: the task's grader parser, else `swesmith:<repo>`). */
  parser?: ParserId;
  /** The agent's shell commands, scanned for history peeking. */
  transcript?: readonly string[];
  /** What a suspicious finding does (default `flag`). */
  onSuspicious?: HackPolicy;
  signal?: AbortSignal;
}

function infra(reason: InfraReason, message: string, extra: Partial<InfraError> = {}): InfraError {
  return { status: 'infra_error', reason, message, flags: [], ...extra };
}

/**
 * Grade the agent's work in the sandbox: capture the patch, reset to the tests-present commit, apply with
 * SWE-smith's fallbacks, restore the F2P/P2P test files, run the eval script, parse, grade, check for spoofing.
 */
export async function gradeSweTask(
  session: SweSession,
  options: GradeSweOptions = {},
): Promise<SweGradeResult> {
  const started = performance.now();
  const { sandbox, task } = session;
  const {
    semantics = 'swesmith',
    evalType = 'pass_and_fail',
    timeoutMs = 90_000,
    onSuspicious = 'flag',
    signal,
  } = options;
  if (task.grader.kind !== 'swesmith')
    throw new GradingError(`task ${task.id} has grader ${task.grader.kind}, not swesmith`);
  if (!task.testCommand)
    throw new GradingError(`task ${task.id} has no testCommand; rowToTask sets it from the repo profile`);
  const op = signal ? { signal } : {};

  let captured: CapturedPatch;
  try {
    captured = options.patch ?? (await captureAgentPatch(session, op));
  } catch (error) {
    if (signal?.aborted) throw error;
    return infra('capture_failed', `could not capture the agent's changes: ${(error as Error).message}`);
  }
  const flags: HackFlag[] = [
    ...testConfigChanges(captured.changedFiles),
    ...captured.changedTestFiles.map((f) => ({
      kind: 'test_files_modified' as const,
      detail: `the agent changed ${f}; it is restored before the tests run`,
    })),
    ...scanTranscript(options.transcript ?? []),
  ];

  // Back to the tests-present commit with a clean tree (ignored build outputs are kept, as upstream).
  const reset = await run(
    sandbox,
    `git reset -q --hard && git clean -fdq && git checkout -q -f ${session.testsCommit}`,
    signal,
  );
  if (reset.exitCode !== 0) {
    return infra(
      'reset_failed',
      `could not return to ${session.testsCommit}: ${reset.output.trim().slice(-800)}`,
      { patch: captured.patch, flags },
    );
  }

  let appliedWith: string | null = null;
  if (captured.patch.trim()) {
    await sandbox.writeFile(PATCH_FILE, captured.patch, op);
    const attempts: string[] = [];
    for (const command of APPLY_COMMANDS) {
      const r = await run(sandbox, `${command} ${PATCH_FILE}`, signal);
      if (r.exitCode === 0) {
        appliedWith = command;
        break;
      }
      attempts.push(`${command}: ${r.output.trim().slice(-400)}`);
      // A failed `--reject`/`patch` may leave partial changes: start the next attempt from a clean tree.
      await run(sandbox, 'git reset -q --hard && git clean -fdq', signal);
    }
    if (appliedWith === null) {
      return infra(
        'patch_apply_failed',
        `${MARKERS.applyFailed}: no apply command took the patch\n${attempts.join('\n')}`,
        {
          patch: captured.patch,
          flags,
        },
      );
    }
  }

  // Restore the hidden tests exactly as they were at the tests-present commit.
  for (const file of session.testFiles) {
    const content = session.snapshot.get(file);
    if (content === null || content === undefined) {
      return infra(
        'missing_test_file',
        `test file ${file} named by the task is absent at ${session.testsCommit}`,
        {
          patch: captured.patch,
          flags,
        },
      );
    }
    await sandbox.writeFile(file, content, op);
  }

  await sandbox.writeFile(
    EVAL_FILE,
    evalScript({ workdir: sandbox.workdir, testCommand: task.testCommand }),
    op,
  );
  const result = await execDetached(sandbox, `bash ${EVAL_FILE} 2>&1`, { timeoutMs, ...op });
  const log = result.timedOut
    ? `${result.output}\n${MARKERS.timedOut}: ${Math.round(timeoutMs / 1000)} seconds exceeded\n`
    : result.output;

  if (/No space left on device/i.test(log))
    return infra('disk_full', 'the sandbox ran out of disk space during the test run', {
      patch: captured.patch,
      log,
      flags,
    });
  if (!result.timedOut && result.exitCode === null) {
    return infra('runner_crashed', 'the test run was killed by a signal (not the timeout)', {
      patch: captured.patch,
      log,
      flags,
    });
  }
  const exitCode = recordedExitCode(log);
  if (exitCode === 126 || exitCode === 127) {
    return infra(
      'test_command_not_found',
      `the test command could not run (exit ${exitCode}): ${task.testCommand}`,
      { patch: captured.patch, log, flags },
    );
  }
  if (!result.timedOut && !(log.includes(MARKERS.start) && log.includes(MARKERS.end))) {
    return infra('markers_missing', 'the eval script did not reach its end marker', {
      patch: captured.patch,
      log,
      flags,
    });
  }

  const { content } = readTestOutput(log);
  const parser =
    options.parser ??
    (task.grader.parser as ParserId | undefined) ??
    (`swesmith:${String(task.metadata.repo ?? task.id)}` as ParserId);
  let statusMap: StatusMap;
  try {
    statusMap =
      content === null
        ? {}
        : parseTestLog(content, { parser, ref: semantics === 'strict' ? 'main' : 'v4.1.0' });
  } catch (error) {
    return infra('parse_failed', `parser ${parser} failed: ${(error as Error).message}`, {
      patch: captured.patch,
      log,
      flags,
    });
  }
  if (content !== null) {
    flags.push(...resultsAfterSummary(content));
    flags.push(...exitCodeMismatch(exitCode, statusMap));
  }

  let report = gradeReport(
    { statusMap, failToPass: task.grader.failToPass, passToPass: task.grader.passToPass },
    { semantics: semantics === 'strict' ? 'swebench-main' : 'swesmith', evalType },
  );
  // strict: a verdict the runner's exit code contradicts is not a pass (SWE-bench main's `found = False`).
  if (semantics === 'strict' && flags.some((f) => f.kind === 'exit_code_mismatch'))
    report = unresolved(report);

  const suspicious = flags.filter((f) => SUSPICIOUS.has(f.kind));
  if (suspicious.length > 0 && onSuspicious === 'infra_error') {
    return infra('reward_hacking_suspected', suspicious.map((f) => f.detail).join('; '), {
      patch: captured.patch,
      log,
      flags,
    });
  }
  if (suspicious.length > 0 && onSuspicious === 'zero') report = unresolved(report);

  return {
    status: 'graded',
    ...report,
    reward: report.resolution === 'RESOLVED_FULL' ? 1 : 0,
    semantics,
    statusMap,
    patch: captured.patch,
    appliedWith,
    exitCode,
    timedOut: result.timedOut,
    log,
    flags,
    durationMs: performance.now() - started,
  };
}

function unresolved(report: GradeReport): GradeReport {
  const status: TestsStatus = report.tests_status;
  return { tests_status: status, resolution: 'RESOLVED_NO' };
}
