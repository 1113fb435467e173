/**
 * The attacker's side of the attack suites: an offline task, the agent's sandbox from a per-repo pool, the
 * agent's edits (written as an attacker would), the captured patch, and the grade of that patch in fresh
 * sandboxes under both semantics, exactly the path `sweRollout` takes (`setupSweTask` → edits →
 * `captureAgentPatch` → `gradeInFreshSandbox`). Bubblewrap and the sandbox's real pytest.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TaskSpec } from '@vime/core';
import { bubblewrapProvider, type Sandbox } from '@vime/sandbox';
import { afterAll, beforeAll } from 'vitest';
// Through the package's entry point, as a user calls it.
import {
  type CapturedPatch,
  captureAgentPatch,
  gradeInFreshSandbox,
  type OfflineTaskSet,
  patchFromDiff,
  type SandboxSource,
  SweEnvironments,
  type SweGradeResult,
  SwePools,
  setupSweTask,
  taskTestFiles,
} from '../../index.js';
import { sharedOfflineSet } from '../../__fixtures__/offline-set.js';

/** What the agent does in its sandbox (its work dir is the repository). */
export type AgentEdit = (sandbox: Sandbox, task: TaskSpec) => Promise<void>;

export interface AttackResult {
  captured: CapturedPatch;
  swesmith: SweGradeResult;
  strict: SweGradeResult;
}

/** One generous budget per attack: a loaded 2-core machine grades a patch twice in fresh sandboxes. */
export const ATTACK_TIMEOUT_MS = 600_000;

/** The task every attack targets: `truncate` cuts one character too late (F2P `test_truncate_cuts_with_ellipsis`). */
export const TARGET_INSTANCE = /\.func_pm_off_by_one__a6a2162d$/;

export interface AttackKit {
  set(): OfflineTaskSet;
  task(): TaskSpec;
  /** Run `edit` as the agent, capture its patch, grade it in fresh sandboxes (default and strict). */
  attack(edit: AgentEdit, options?: { timeoutMs?: number | undefined }): Promise<AttackResult>;
  /** The same for another task of the set. */
  attackOn(task: TaskSpec, edit: AgentEdit, options?: { timeoutMs?: number | undefined }): Promise<AttackResult>;
  /** Where the kit's sandboxes come from, for a test that wraps them. */
  source(): SandboxSource;
  /** Grade a patch made elsewhere (the gold patch, none) in a fresh sandbox. */
  grade(task: TaskSpec, patch: string, semantics: 'swesmith' | 'strict'): Promise<SweGradeResult>;
}

/** Pools and the offline set for one test file (registered as its beforeAll/afterAll). */
export function useAttackKit(): AttackKit {
  const work = mkdtempSync(join(tmpdir(), 'vime-swe-attack-'));
  chmodSync(work, 0o755);
  let set: OfflineTaskSet;
  let pools: SwePools;
  beforeAll(async () => {
    set = await sharedOfflineSet();
    const environments = await SweEnvironments.forDataset(set.jsonlPath);
    pools = new SwePools(bubblewrapProvider({ rootDir: join(work, 'bwrap') }), set.tasks, {
      kind: 'bubblewrap',
      environments,
      replicas: 2,
      maxLivePerPool: 6,
    });
  }, 300_000);
  afterAll(async () => {
    await pools?.close();
    execFileSync('rm', ['-rf', work]);
  });

  const attackOn = async (
    task: TaskSpec,
    edit: AgentEdit,
    options: { timeoutMs?: number | undefined } = {},
  ): Promise<AttackResult> => {
    const sandbox = await pools.claim(task);
    let captured: CapturedPatch;
    try {
      const session = await setupSweTask(sandbox, task);
      await edit(sandbox, task);
      const c = await captureAgentPatch(session);
      if ('failed' in c) throw new Error(`capture failed: ${c.message}`);
      captured = c;
    } finally {
      await pools.release(sandbox);
    }
    const timeoutMs = options.timeoutMs ?? 120_000;
    const swesmith = await gradeInFreshSandbox(pools, task, captured, { timeoutMs });
    const strict = await gradeInFreshSandbox(pools, task, captured, { timeoutMs, semantics: 'strict' });
    return { captured, swesmith, strict };
  };
  return {
    set: () => set,
    task: () => set.tasks.find((t) => TARGET_INSTANCE.test(t.id))!,
    attack: (edit, options) => attackOn(set.tasks.find((t) => TARGET_INSTANCE.test(t.id))!, edit, options),
    attackOn,
    source: () => pools,
    grade: (task, patch, semantics) =>
      gradeInFreshSandbox(pools, task, patchFromDiff(patch, taskTestFiles(task)), { semantics, timeoutMs: 120_000 }),
  };
}

/** A short, comparable view of a grade. */
export function verdict(r: SweGradeResult) {
  return r.status === 'graded'
    ? { status: r.status, outcome: r.outcome, reward: r.reward, hacks: r.hacks }
    : { status: r.status, reason: r.reason, message: r.message.slice(0, 400) };
}

// --- the agent's edits ------------------------------------------------------------------------------

export const run =
  (command: string): AgentEdit =>
  async (sandbox) => {
    const r = await sandbox.exec(command);
    if (r.exitCode !== 0) throw new Error(`agent command failed: ${command}\n${r.output}`);
  };

export const write =
  (path: string, content: string): AgentEdit =>
  (sandbox) =>
    sandbox.writeFile(path, content);

/** Append to a file of the repository (the file exists: a change, not a new file). */
export const append =
  (path: string, content: string): AgentEdit =>
  async (sandbox) => {
    const before = await sandbox.readTextFile(path);
    await sandbox.writeFile(path, `${before}${before.endsWith('\n') ? '' : '\n'}${content}`);
  };

/** Replace `from` by `to` in a file of the repository (the edit must find `from`). */
export const replace =
  (path: string, from: string, to: string): AgentEdit =>
  async (sandbox) => {
    const before = await sandbox.readTextFile(path);
    if (!before.includes(from)) throw new Error(`${path} does not contain ${JSON.stringify(from)}`);
    await sandbox.writeFile(path, before.replace(from, to));
  };

export const all =
  (...edits: AgentEdit[]): AgentEdit =>
  async (sandbox, task) => {
    for (const edit of edits) await edit(sandbox, task);
  };

/** The buggy line of the target task and the fix it needs. */
export const BUGGY_CUT = 'return text[: width - len(ellipsis) + 1] + ellipsis';

/** Every F2P and P2P id of a task: what a forged log names. */
export const allTestIds = (task: TaskSpec) =>
  task.grader.kind === 'swesmith' ? [...task.grader.failToPass, ...task.grader.passToPass] : [];

/** Python source: the payload that turns every failing call report into a pass, given `reports` (`_pytest.reports`). */
export const FORCE_PASS = `
def _vx(reports, only=None):
    cls = getattr(reports, "Test" + "Report")
    made = cls.from_item_and_call.__func__

    def make(c, item, call):
        rep = made(c, item, call)
        if rep.when == "call" and rep.outcome != "passed" and (only is None or rep.nodeid.endswith(only)):
            rep.outcome = "passed"
            rep.longrepr = None
        return rep

    cls.from_item_and_call = classmethod(make)
`;
