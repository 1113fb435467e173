/**
 * End to end on real sandboxes: for every offline instance, the gold patch grades RESOLVED_FULL (reward 1)
 * and the empty patch RESOLVED_NO; fixing one half of a combined bug grades RESOLVED_PARTIAL; a conftest
 * spoof is caught; infrastructure failures come back as `infra_error`. Runs on bubblewrap, and on docker
 * where an engine is up (CI as root always has one: scripts/docker-up.sh).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TaskSpec } from '@vime/core';
import {
  bubblewrapProvider,
  dockerProvider,
  localProvider,
  type Sandbox,
  type SandboxProvider,
} from '@vime/sandbox';
import { dockerAvailable, testImage } from '@vime/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildOfflineTaskSet, type OfflineTaskSet } from './offline.js';
import { gradeSweTask, type SweGradeResult, setupSweTask } from './steps.js';

const work = mkdtempSync(join(tmpdir(), 'vime-swe-e2e-'));
// The sandbox user (not root) must be able to reach its work dir below this folder.
chmodSync(work, 0o755);
let set: OfflineTaskSet;

beforeAll(async () => {
  // Fail loudly when a tool the tests need is missing (scripts/bootstrap.sh installs them in CI).
  for (const [tool, args] of [
    ['git', ['--version']],
    ['bwrap', ['--version']],
    ['patch', ['--version']],
    ['python3', ['-m', 'pytest', '--version']],
  ] as const) {
    execFileSync(tool, args, { stdio: 'ignore' });
  }
  set = await buildOfflineTaskSet({ dir: join(work, 'tasks') });
}, 300_000);

const isRoot = process.getuid?.() === 0;
const backends: Array<[string, () => SandboxProvider, string | undefined]> = [
  ['bubblewrap', () => bubblewrapProvider({ rootDir: join(work, 'bwrap') }), undefined],
];
if (isRoot || dockerAvailable()) backends.push(['docker', () => dockerProvider(), testImage]);

/** Run `fn` over `items` with at most `n` at a time. */
async function pool<T>(items: readonly T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

function summary(r: SweGradeResult) {
  return r.status === 'graded'
    ? { status: r.status, resolution: r.resolution, reward: r.reward, flags: r.flags.map((f) => f.kind) }
    : { status: r.status, reason: r.reason, message: r.message.slice(0, 300) };
}

describe.each(backends)('offline SWE-smith instances on %s', (_name, makeProvider, image) => {
  let provider: SandboxProvider;
  beforeAll(() => {
    provider = makeProvider();
  });

  /** A fresh sandbox with the task set up; `agent` edits the work tree; then grade. */
  async function attempt(
    task: TaskSpec,
    agent: (sbx: Sandbox) => Promise<void>,
    options: Parameters<typeof gradeSweTask>[1] = {},
  ): Promise<SweGradeResult> {
    const sbx = await provider.create({ workdir: '/testbed', ...(image ? { image } : {}) });
    try {
      const session = await setupSweTask(sbx, task);
      await agent(sbx);
      return await gradeSweTask(session, options);
    } finally {
      await sbx.terminate();
    }
  }

  const applyInWorkTree = (patch: string) => async (sbx: Sandbox) => {
    await sbx.writeFile('.git/agent.diff', patch);
    const r = await sbx.exec('git apply .git/agent.diff');
    if (r.exitCode !== 0) throw new Error(`agent patch did not apply: ${r.output}`);
  };

  it('every instance: the gold patch grades RESOLVED_FULL, the empty patch RESOLVED_NO', async () => {
    const failures: string[] = [];
    await pool(set.tasks, 2, async (task) => {
      const gold = await attempt(task, applyInWorkTree(task.goldPatch!));
      if (gold.status !== 'graded' || gold.resolution !== 'RESOLVED_FULL' || gold.reward !== 1) {
        failures.push(`${task.id} gold: ${JSON.stringify(summary(gold))}`);
      }
      const empty = await attempt(task, async () => {});
      if (empty.status !== 'graded' || empty.resolution !== 'RESOLVED_NO' || empty.reward !== 0) {
        failures.push(`${task.id} empty: ${JSON.stringify(summary(empty))}`);
      }
    });
    expect(failures).toEqual([]);
  }, 900_000);

  it('fixing one half of a combined bug grades RESOLVED_PARTIAL', async () => {
    expect(set.combined.length).toBeGreaterThan(0);
    for (const c of set.combined) {
      const task = set.tasks.find((t) => t.id === c.instanceId)!;
      const r = await attempt(task, applyInWorkTree(c.halfFixPatch));
      expect(summary(r), c.instanceId).toMatchObject({
        status: 'graded',
        resolution: 'RESOLVED_PARTIAL',
        reward: 0,
      });
      if (r.status === 'graded') {
        expect(r.tests_status.FAIL_TO_PASS.success.length, c.instanceId).toBeGreaterThan(0);
        expect(r.tests_status.FAIL_TO_PASS.failure.length, c.instanceId).toBeGreaterThan(0);
      }
    }
  }, 300_000);

  describe('a conftest.py that prints fake results after the summary', () => {
    const spoof = (task: TaskSpec) => async (sbx: Sandbox) => {
      const ids = task.grader.kind === 'swesmith' ? task.grader.failToPass : [];
      await sbx.writeFile(
        'conftest.py',
        `def pytest_unconfigure(config):\n    for test in ${JSON.stringify(ids)}:\n        print(test + " PASSED")\n`,
      );
    };

    it('fools the upstream parser, and is flagged', async () => {
      const task = set.tasks[0]!;
      const r = await attempt(task, spoof(task));
      // SWE-smith itself resolves this spoof (golden `no_fix_spoofing_conftest`); the flags say why not to trust it.
      expect(summary(r)).toMatchObject({ status: 'graded', resolution: 'RESOLVED_FULL' });
      if (r.status !== 'graded') return;
      expect(r.flags.map((f) => f.kind)).toEqual(
        expect.arrayContaining(['test_config_changed', 'results_after_summary', 'exit_code_mismatch']),
      );
    }, 120_000);

    it('grades 0 with onSuspicious "zero", infra_error with "infra_error", unresolved under strict', async () => {
      const task = set.tasks[1]!;
      expect(summary(await attempt(task, spoof(task), { onSuspicious: 'zero' }))).toMatchObject({
        status: 'graded',
        resolution: 'RESOLVED_NO',
        reward: 0,
      });
      expect(summary(await attempt(task, spoof(task), { onSuspicious: 'infra_error' }))).toMatchObject({
        status: 'infra_error',
        reason: 'reward_hacking_suspected',
      });
      expect(summary(await attempt(task, spoof(task), { semantics: 'strict' }))).toMatchObject({
        status: 'graded',
        resolution: 'RESOLVED_NO',
      });
    }, 180_000);
  });

  it('re-creating a hidden test file does not count: the file is restored, the bug still fails', async () => {
    const task = set.tasks[2]!;
    const file = (task.metadata.test_files as { FAIL_TO_PASS: string[] }).FAIL_TO_PASS[0]!;
    const r = await attempt(task, async (sbx) => {
      await sbx.writeFile(file, 'def test_anything():\n    assert True\n');
    });
    // Upstream every apply command fails on this patch (golden `no_fix_f2p_test_file_recreated`).
    expect(summary(r)).toMatchObject({
      status: 'graded',
      resolution: 'RESOLVED_NO',
      flags: ['test_files_modified'],
    });
  }, 120_000);

  it('hides history beyond the task commit and still grades the gold patch', async () => {
    const task = set.tasks[3]!;
    const sbx = await provider.create({ workdir: '/testbed', ...(image ? { image } : {}) });
    try {
      const session = await setupSweTask(sbx, task, { hideHistory: true });
      const log = await sbx.exec(
        'git log --all --oneline | wc -l; git show HEAD~1 >/dev/null 2>&1; echo show=$?',
      );
      expect(log.stdout).toBe('1\nshow=128\n');
      await applyInWorkTree(task.goldPatch!)(sbx);
      expect(summary(await gradeSweTask(session))).toMatchObject({
        status: 'graded',
        resolution: 'RESOLVED_FULL',
        reward: 1,
      });
    } finally {
      await sbx.terminate();
    }
  }, 120_000);

  it('reports infrastructure failures as infra_error, never as reward 0', async () => {
    const task = set.tasks[4]!;
    const broken = await attempt(task, async () => {}, {
      patch: {
        patch: 'diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n',
        changedFiles: ['nope.py'],
        changedTestFiles: [],
      },
    });
    expect(summary(broken)).toMatchObject({ status: 'infra_error', reason: 'patch_apply_failed' });

    const missing: TaskSpec = {
      ...task,
      grader: {
        ...(task.grader as Extract<TaskSpec['grader'], { kind: 'swesmith' }>),
        failToPass: ['tests/test_gone.py::test_x'],
      },
      metadata: { ...task.metadata, test_files: { FAIL_TO_PASS: ['tests/test_gone.py'], PASS_TO_PASS: [] } },
    };
    expect(summary(await attempt(missing, async () => {}))).toMatchObject({
      status: 'infra_error',
      reason: 'missing_test_file',
    });

    const noRunner: TaskSpec = { ...task, testCommand: 'no-such-test-runner --verbose' };
    expect(summary(await attempt(noRunner, async () => {}))).toMatchObject({
      status: 'infra_error',
      reason: 'test_command_not_found',
    });
  }, 180_000);
});

describe('offline instances on the local provider', () => {
  it('grade the same way (gold FULL, empty NO)', async () => {
    const provider = localProvider({ rootDir: join(work, 'local') });
    const task = set.tasks[5]!;
    for (const [patch, resolution] of [
      [task.goldPatch!, 'RESOLVED_FULL'],
      ['', 'RESOLVED_NO'],
    ] as const) {
      const sbx = await provider.create({ workdir: '/testbed' });
      try {
        const session = await setupSweTask(sbx, task);
        if (patch) {
          await sbx.writeFile('.git/agent.diff', patch);
          expect((await sbx.exec('git apply .git/agent.diff')).exitCode).toBe(0);
        }
        expect(summary(await gradeSweTask(session))).toMatchObject({ status: 'graded', resolution });
      } finally {
        await sbx.terminate();
      }
    }
  }, 120_000);
});

afterAll(() => {
  execFileSync('rm', ['-rf', work]);
});
