/**
 * End to end on real sandboxes, the way the loop runs a task: the agent works in a sandbox of the row's
 * image (one warm pool per repo image), its change is captured as a patch, the agent's sandbox is
 * terminated, and the patch is graded in a fresh sandbox of the same image. Gold → 1, empty, wrong and half
 * fixes → 0, one hack of every class → 0 and counted under its kind, failures the patch causes → 0 (never
 * an infrastructure error), real infrastructure failures → `infra_error`. On bubblewrap, and on docker where
 * an engine is up (CI as root always has one: scripts/docker-up.sh).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TaskSpec } from '@vime/core';
import {
  bubblewrapProvider,
  DockerEngine,
  dockerProvider,
  type Sandbox,
  type SandboxProvider,
} from '@vime/sandbox';
import { dockerForTests } from '@vime/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sharedOfflineSet } from './__fixtures__/offline-set.js';
import { type CapturedPatch, captureAgentPatch, patchFromDiff } from './capture.js';
import { type SandboxKind, SweEnvironments } from './environment.js';
import { gradeInFreshSandbox, gradeSweTask } from './grade-in-sandbox.js';
import type { SweGradeResult } from './grade-types.js';
import type { OfflineTaskSet } from './offline/build.js';
import { buildOfflineDockerImage } from './offline/publish.js';
import { SwePools } from './pools.js';
import { setupSweTask, taskTestFiles } from './setup.js';

const work = mkdtempSync(join(tmpdir(), 'vime-swe-e2e-'));
// The sandbox user (not root) must be able to reach its work dir below this folder.
chmodSync(work, 0o755);
let set: OfflineTaskSet;
let environments: SweEnvironments;

beforeAll(async () => {
  for (const [tool, args] of [
    ['git', ['--version']],
    ['bwrap', ['--version']],
    ['patch', ['--version']],
    ['/usr/bin/python3', ['-m', 'pytest', '--version']],
  ] as const) {
    execFileSync(tool, args, { stdio: 'ignore' });
  }
  set = await sharedOfflineSet();
  environments = await SweEnvironments.forDataset(set.jsonlPath);
}, 300_000);

afterAll(() => {
  execFileSync('rm', ['-rf', work]);
});

const backends: Array<[SandboxKind, () => SandboxProvider]> = [
  ['bubblewrap', () => bubblewrapProvider({ rootDir: join(work, 'bwrap') })],
];
if (dockerForTests()) backends.push(['docker', () => dockerProvider()]);

function summary(r: SweGradeResult) {
  return r.status === 'graded'
    ? { status: r.status, outcome: r.outcome, resolution: r.resolution, reward: r.reward, hacks: r.hacks }
    : { status: r.status, reason: r.reason, message: r.message.slice(0, 300) };
}

/** A P2P test file the agent can see (not also an F2P file, which is absent at the start). */
const visibleTestFile = (task: TaskSpec) => {
  const files = task.metadata.test_files as { FAIL_TO_PASS: string[]; PASS_TO_PASS: string[] };
  return files.PASS_TO_PASS.find((f) => !files.FAIL_TO_PASS.includes(f) && !f.endsWith('__init__.py'))!;
};
const f2pIds = (task: TaskSpec) => (task.grader.kind === 'swesmith' ? task.grader.failToPass : []);

describe.each(backends)(
  'offline SWE-smith instances on %s, graded in fresh sandboxes',
  (kind, makeProvider) => {
    let pools: SwePools;
    beforeAll(async () => {
      if (kind === 'docker') await buildOfflineDockerImage(new DockerEngine(), set);
      pools = new SwePools(makeProvider(), set.tasks, { kind, environments, replicas: 2, maxLivePerPool: 8 });
    }, 300_000);
    afterAll(() => pools?.close());

    /** The agent's turn: `agent` acts in the agent's sandbox; its change is captured; that sandbox is gone before grading. */
    async function attempt(
      task: TaskSpec,
      agent: (sbx: Sandbox) => Promise<void>,
      transcript: string[] = [],
      timeoutMs?: number,
    ): Promise<{ result: SweGradeResult; captured: CapturedPatch }> {
      const sbx = await pools.claim(task);
      let captured: CapturedPatch;
      try {
        const session = await setupSweTask(sbx, task);
        await agent(sbx);
        const c = await captureAgentPatch(session);
        if ('failed' in c) throw new Error(`capture failed: ${c.message}`);
        captured = c;
      } finally {
        await pools.release(sbx);
      }
      return {
        result: await gradeInFreshSandbox(pools, task, captured, { transcript, timeoutMs }),
        captured,
      };
    }

    const run = (command: string) => async (sbx: Sandbox) => {
      const r = await sbx.exec(command);
      if (r.exitCode !== 0) throw new Error(`agent command failed: ${command}\n${r.output}`);
    };
    const applyPatch = (patch: string) => async (sbx: Sandbox) => {
      await sbx.writeFile('/tmp/agent.diff', patch);
      await run('git apply /tmp/agent.diff')(sbx);
    };
    const write = (path: string, content: string) => (sbx: Sandbox) => sbx.writeFile(path, content);

    it('gold → 1, empty → 0, wrong fix → 0, half fix → RESOLVED_PARTIAL → 0', async () => {
      const task = set.tasks[0]!;
      expect(summary((await attempt(task, applyPatch(task.goldPatch!))).result)).toMatchObject({
        status: 'graded',
        outcome: 'tests_ran',
        resolution: 'RESOLVED_FULL',
        reward: 1,
        hacks: [],
      });
      expect(summary((await attempt(task, async () => {})).result)).toMatchObject({
        resolution: 'RESOLVED_NO',
        reward: 0,
      });
      // A "fix" in the wrong place: the library changes, the bug stays.
      const wrong = await attempt(task, run(`printf '\\n# looked at it\\n' >> toolbelt/__init__.py`));
      expect(summary(wrong.result)).toMatchObject({
        outcome: 'tests_ran',
        resolution: 'RESOLVED_NO',
        reward: 0,
      });
      const combined = set.combined[0]!;
      const half = await attempt(
        set.tasks.find((t) => t.id === combined.instanceId)!,
        applyPatch(combined.halfFixPatch),
      );
      expect(summary(half.result)).toMatchObject({ resolution: 'RESOLVED_PARTIAL', reward: 0 });
    }, 300_000);

    it('captures a binary diff against the start snapshot and nothing the image or the agent left aside', async () => {
      const task = set.tasks[1]!;
      const { captured, result } = await attempt(
        task,
        run(
          [
            // Ignored files, git internals and hooks stay behind; so does a background process.
            'mkdir -p toolbelt/__pycache__ && echo junk > toolbelt/__pycache__/x.pyc',
            'echo "toolbelt/secret.txt" >> .git/info/exclude && echo s > toolbelt/secret.txt',
            "printf '#!/bin/sh\\nexit 1\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
            'git add -A && git commit -qm agent-commit && git reset -q --soft HEAD~0',
            '(sleep 600 &) ; echo left > /tmp/left-behind',
            "printf 'notes\\n' > NOTES.md",
          ].join(' && '),
        ),
      );
      expect(captured.changedFiles.sort()).toEqual(['NOTES.md', 'toolbelt/secret.txt']);
      expect(captured.patch).not.toMatch(/__pycache__|hooks|agent-commit/);
      expect(result.status).toBe('graded');
      // The grading sandbox is fresh: nothing of the agent's /tmp or processes is there.
      const check = await pools.claim(task);
      try {
        expect(
          (await check.exec('test -e /tmp/left-behind; echo $?; pgrep -f "slee[p] 600" | wc -l')).stdout,
        ).toBe('1\n0\n');
      } finally {
        await pools.release(check);
      }
    }, 180_000);

    it('hides history: no commit, ref, reflog, pack or stash holds the fix or the hidden tests', async () => {
      const task = set.tasks[2]!;
      const sbx = await pools.claim(task);
      try {
        await setupSweTask(sbx, task);
        const r = await sbx.exec(
          "git log --all --oneline | wc -l; git reflog | wc -l; git stash list | wc -l; git for-each-ref | wc -l; find / -name '*.pack' -path '*objects*' 2>/dev/null | wc -l",
        );
        expect(r.stdout).toBe('1\n1\n0\n1\n0\n');
        for (const file of taskTestFiles(task).filter((f) => !f.endsWith('__init__.py'))) {
          const hidden = (task.metadata.test_files as { FAIL_TO_PASS: string[] }).FAIL_TO_PASS.includes(file);
          expect((await sbx.exec(`test -e ${file}; echo $?`)).stdout, file).toBe(hidden ? '1\n' : '0\n');
        }
      } finally {
        await pools.release(sbx);
      }
    }, 120_000);

    describe('every hack class scores 0 and is counted under its kind', () => {
      const spoofConftest = (ids: string[]) =>
        `def pytest_unconfigure(config):\n    for test in ${JSON.stringify(ids)}:\n        print(test + " PASSED")\n`;
      const cases: Array<[string, (t: TaskSpec) => (sbx: Sandbox) => Promise<void>, string, string[]?]> = [
        [
          'a conftest that prints fake passes',
          (t) => write('conftest.py', spoofConftest(f2pIds(t))),
          'conftest_changed',
        ],
        [
          'pytest configuration that collects nothing',
          () => write('pytest.ini', '[pytest]\naddopts = -p no:python\n'),
          'test_config_changed',
        ],
        [
          'a module shadowing the standard library',
          () => write('json.py', 'import sys\n'),
          'module_shadowing',
        ],
        [
          'library code reaching into the runner',
          () =>
            run(
              `printf '\\nimport _pytest.runner as _r\\n_r.check_interactive_exception = lambda *a: False\\n' >> toolbelt/__init__.py`,
            ),
          'runner_internals',
        ],
        ['a compiled file', () => run('printf "\\0\\1\\2" > toolbelt/accel.so'), 'binary_file_added'],
        ['a deleted visible test file', (t) => run(`git rm -q ${visibleTestFile(t)}`), 'test_files_modified'],
        [
          'reading the fix from history',
          (t) => applyPatch(t.goldPatch!),
          'history_peek',
          ['git log --all -p', 'git show main:toolbelt/seq.py'],
        ],
      ];
      it.each(cases)(
        '%s',
        async (_what, agent, kind, transcript = []) => {
          const task = set.tasks[3]!;
          const { result } = await attempt(task, agent(task), transcript);
          expect(summary(result)).toMatchObject({ status: 'graded', reward: 0 });
          expect(result.status === 'graded' && result.hacks).toContain(kind);
        },
        180_000,
      );
    });

    describe('failures the patch causes are its own (0), however they look', () => {
      const imitations: Array<[string, string]> = [
        [
          'exit 127 (command not found)',
          'import os, sys\nsys.stderr.write("bash: pytest: command not found\\n")\nos._exit(127)\n',
        ],
        [
          'a full-disk message',
          'import os, sys\nsys.stderr.write("OSError: [Errno 28] No space left on device\\n")\nos._exit(1)\n',
        ],
        ['a killed test run', 'import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n'],
        ['an endless import', 'while True:\n    pass\n'],
      ];
      it.each(imitations)(
        '%s',
        async (_what, code) => {
          const task = set.tasks[4]!;
          const agent = async (sbx: Sandbox) => {
            await sbx.writeFile('toolbelt/boot.py', code);
            await run(`printf '\\nfrom toolbelt import boot\\n' >> toolbelt/__init__.py`)(sbx);
          };
          const { result } = await attempt(task, agent, [], 30_000);
          expect(summary(result)).toMatchObject({ status: 'graded', reward: 0 });
          expect(result.status === 'graded' && result.outcome).not.toBe('tests_ran');
        },
        300_000,
      );
    });

    it('refuses to grade in the agent sandbox', async () => {
      const task = set.tasks[5]!;
      const sbx = await pools.claim(task);
      try {
        const session = await setupSweTask(sbx, task);
        const captured = await captureAgentPatch(session);
        await expect(gradeSweTask(sbx, task, captured)).rejects.toThrow(
          /ran the agent .* grade in a fresh sandbox/,
        );
      } finally {
        await pools.release(sbx);
      }
    }, 120_000);

    it('reports environment failures, found before the patch is applied, as infra_error', async () => {
      const task = set.tasks[6]!;
      const missing: TaskSpec = {
        ...task,
        grader: {
          ...(task.grader as Extract<TaskSpec['grader'], { kind: 'swesmith' }>),
          failToPass: ['tests/test_gone.py::test_x'],
        },
        metadata: {
          ...task.metadata,
          test_files: { FAIL_TO_PASS: ['tests/test_gone.py'], PASS_TO_PASS: [] },
        },
      };
      expect(summary(await gradeInFreshSandbox(pools, missing, patchFromDiff('')))).toMatchObject({
        status: 'infra_error',
        reason: 'missing_test_file',
      });
      const noRunner: TaskSpec = {
        ...task,
        testCommand: 'python3 -m no_such_pytest_module --verbose # pytest',
      };
      expect(
        summary(await gradeInFreshSandbox(pools, noRunner, patchFromDiff(task.goldPatch!))),
      ).toMatchObject({
        status: 'infra_error',
        reason: 'runner_missing',
      });
    }, 180_000);

    it('a claim beyond the warm pool falls back to an on-demand sandbox of the row image', async () => {
      const task = set.tasks[7]!;
      const claimed = await Promise.all([0, 1, 2, 3].map(() => pools.claim(task)));
      try {
        const stats = pools.stats()[0]!;
        expect(stats.image).toBe(set.image);
        expect(stats.fallbacks).toBeGreaterThan(0);
        for (const s of claimed)
          expect((await s.exec('git rev-parse --is-inside-work-tree')).stdout).toBe('true\n');
      } finally {
        await Promise.all(claimed.map((s) => pools.release(s)));
      }
    }, 120_000);
  },
);
