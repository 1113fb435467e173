/**
 * The buggy start state of a SWE-smith task in a sandbox: stage the task's files, check out the instance
 * branch (the setup command), find the tests-present commit. For the agent's sandbox the repository's
 * history is then replaced by one commit of the start state (nothing of the fix or the hidden tests can be
 * read from `.git`), and the work dir is snapshotted into a private git dir, against which the agent's
 * change is captured later.
 */
import { GradingError, type TaskSpec } from '@vime/core';
import { shellJoin } from '@vime/core/utils';
import { runSetup, type Sandbox, stageFiles } from '@vime/sandbox';
import { GIT_ENV, shOk } from './git.js';
import { REMOVE_TESTS_SUBJECT } from './layout.js';
import { pythonTestFiles } from './profiles.js';

/** The private git dir holding the snapshot of the agent's start state (outside the work dir). */
export const SNAPSHOT_GIT_DIR = '/tmp/.vime-start-snapshot.git';

/**
 * A task set up in its sandbox: the sandbox, the task, the tree the agent starts from and the task's test
 * files.
 */
export interface SweSession {
  sandbox: Sandbox;
  task: TaskSpec;
  /** The tree of the work dir before the agent ran (in `SNAPSHOT_GIT_DIR`): the base of the captured patch. */
  startTree: string;
  historyHidden: boolean;
  /** Test files of the task: F2P (absent at the start) and P2P (present). */
  testFiles: { failToPass: string[]; passToPass: string[] };
}

/** Options of `setupSweTask`. */
export interface SetupSweOptions {
  /** Extra attempts of the setup command on transient failures (default 2). */
  retries?: number | undefined;
  /** Setup command timeout (default 120 s). */
  timeoutMs?: number | undefined;
  /**
   * Replace the repository's history by one commit of the start state, so no commit, ref, reflog, pack or
   * stash holds the fix or the hidden tests (default true). Only for research on history peeking: false.
   */
  hideHistory?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/** Sandboxes an agent ran in: grading there is refused unless asked for by name. */
export const agentSandboxes = new WeakSet<Sandbox>();

/**
 * F2P and P2P test files of a task: from its metadata when `rowToTask` recorded them (the repo profile's
 * rule), else the Python rule (the part of each id before `::`).
 */
export function taskTestFileSets(task: TaskSpec): { failToPass: string[]; passToPass: string[] } {
  if (task.grader.kind !== 'swesmith') {
    throw new GradingError(`task ${task.id} has grader ${task.grader.kind}, not swesmith`);
  }
  const recorded = task.metadata.test_files as
    | { FAIL_TO_PASS?: string[] | undefined; PASS_TO_PASS?: string[] | undefined }
    | undefined;
  const [failToPass, passToPass] = recorded?.FAIL_TO_PASS
    ? [recorded.FAIL_TO_PASS, recorded.PASS_TO_PASS ?? []]
    : pythonTestFiles({ FAIL_TO_PASS: task.grader.failToPass, PASS_TO_PASS: task.grader.passToPass });
  return { failToPass, passToPass };
}

/** Every F2P/P2P test file of a task, sorted and unique: what grading restores. */
export function taskTestFiles(task: TaskSpec): string[] {
  const { failToPass, passToPass } = taskTestFileSets(task);
  return [...new Set([...failToPass, ...passToPass])].sort();
}

/** A task's buggy state checked out: the commit the agent starts from. */
export interface InstanceCheckout {
  /** The commit the agent starts from: the bug, F2P test files absent. */
  startCommit: string;
  /** The bug with every test present (`HEAD~1` of the instance branch in SWE-smith's layout). */
  testsCommit: string;
}

/**
 * Check the instance out: stage files, run the setup command (with retries), and make sure the F2P test
 * files are absent at the start, committing their removal for rows gathered before SWE-smith added that
 * commit (there, the tests are at the start commit itself).
 */
export async function checkoutInstance(
  sandbox: Sandbox,
  task: TaskSpec,
  options: SetupSweOptions = {},
): Promise<InstanceCheckout> {
  const { retries = 2, timeoutMs = 120_000, signal } = options;
  const op = { signal };
  await stageFiles(sandbox, task.files, signal ? { signal } : {});
  if (task.setupCommand) {
    await runSetup(sandbox, task.setupCommand, {
      retries,
      timeoutMs,
      env: GIT_ENV,
      ...(signal ? { signal } : {}),
    });
  }
  const head = (
    await shOk(sandbox, 'git rev-parse HEAD && git log -1 --format=%s HEAD', 'reading the start commit', op)
  )
    .trim()
    .split('\n');
  const [commit = '', subject = ''] = head;
  if (subject === REMOVE_TESTS_SUBJECT) {
    const tests = (
      await shOk(sandbox, 'git rev-parse HEAD~1', 'reading the tests-present commit', op)
    ).trim();
    return { startCommit: commit, testsCommit: tests };
  }
  // One-commit layout (rows gathered before mid-2025, or non-Python repos): the tests are at HEAD.
  const present = taskTestFileSets(task).failToPass.filter(Boolean);
  if (present.length === 0) return { startCommit: commit, testsCommit: commit };
  await shOk(
    sandbox,
    `git rm -q --ignore-unmatch -- ${shellJoin(present)} && (git diff --cached --quiet || git commit -q --no-verify -m '${REMOVE_TESTS_SUBJECT}')`,
    'removing the F2P test files',
    op,
  );
  const start = (await shOk(sandbox, 'git rev-parse HEAD', 'reading the start commit', op)).trim();
  return { startCommit: start, testsCommit: commit };
}

/** Replace `.git` by a one-commit repository of the work dir as it is. */
export async function hideHistory(sandbox: Sandbox, message: string, signal?: AbortSignal): Promise<void> {
  await shOk(
    sandbox,
    `rm -rf .git && git init -q && git add -A && git commit -q --no-verify --allow-empty -m ${shellJoin([message])}`,
    'hiding the history',
    { signal },
  );
}

/**
 * Establish the agent's start state: the instance checked out, history hidden (default), and the work
 * dir snapshotted into a private git dir (everything the image shipped, tracked or not, is in the
 * snapshot, so none of it can leak into the captured patch).
 */
export async function setupSweTask(
  sandbox: Sandbox,
  task: TaskSpec,
  options: SetupSweOptions = {},
): Promise<SweSession> {
  const { hideHistory: hide = true, signal } = options;
  await checkoutInstance(sandbox, task, options);
  if (hide) await hideHistory(sandbox, 'Task start', signal);
  const startTree = (
    await shOk(
      sandbox,
      `rm -rf ${SNAPSHOT_GIT_DIR} && git init -q --bare ${SNAPSHOT_GIT_DIR} && ${snapshotGit('add -A')} && ${snapshotGit('write-tree')}`,
      'snapshotting the start state',
      { signal },
    )
  ).trim();
  agentSandboxes.add(sandbox);
  return { sandbox, task, startTree, historyHidden: hide, testFiles: taskTestFileSets(task) };
}

/** git over the work dir with the snapshot's private git dir and index (the agent's own `.git` is untouched). */
export function snapshotGit(args: string): string {
  return `git --git-dir=${SNAPSHOT_GIT_DIR} --work-tree=. ${args}`;
}
