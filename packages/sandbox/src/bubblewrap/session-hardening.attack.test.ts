import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttackCase, CaseResult } from '../__fixtures__/attacks.js';
import { attacks, py, removeDirs, users } from '../__fixtures__/hardening.js';
import { isRoot } from '../__fixtures__/support.js';

afterAll(removeDirs);

const FORK_AND_HOLD = py(
  'import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(60)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n, flush=True)\ntime.sleep(60)',
);
const SESSION_ENDED = /session ended/;
const STARVE_PIDS = 64;
/**
 * No step hung or failed to run. Where cgroups track each exec, the session also outlived the bombs: each
 * ran into its timeout and no step saw its session end. (Without them a timeout ends the session by
 * design, and RLIMIT_NPROC stops a shell bomb at once.)
 */
function sessionSurvived(r: CaseResult, bombs: number[], who: { cgroups: boolean }): void {
  for (const s of r.steps) {
    expect(s.hung).toBe(false);
    expect(s.error).toBeUndefined();
  }
  if (!who.cgroups) return;
  for (const i of bombs) expect(r.steps[i]!.timedOut, JSON.stringify(r.steps[i])).toBe(true);
  for (const s of r.steps) expect(s.stderr).not.toMatch(SESSION_ENDED);
}

/**
 * A command that fills the pids limit must not stop the sandbox from starting the next command: its
 * session's supervisor forks every command, and a supervisor that died of a failed fork took the session
 * (and every exec in flight) with it.
 */
const starveCases: Array<{
  name: string;
  steps: AttackCase['steps'];
  check: (r: CaseResult, who: { cgroups: boolean }) => void;
}> = [
  {
    name: 'python forks until refused and keeps every process; a command started meanwhile runs',
    steps: [
      { cmd: FORK_AND_HOLD, timeoutMs: 8000, background: true },
      { cmd: 'echo ok', timeoutMs: 10_000, delayMs: 2500 },
      { cmd: 'echo after', timeoutMs: 10_000, delayMs: 6500 },
    ],
    check: (r, who) => {
      sessionSurvived(r, [0], who);
      // It did fill its share: more than a third of the limit, and not past it.
      expect(Number(r.steps[0]!.stdout.trim())).toBeGreaterThan(STARVE_PIDS / 3);
      expect(Number(r.steps[0]!.stdout.trim())).toBeLessThan(STARVE_PIDS);
      expect(r.steps[1]!.stdout).toBe('ok\n');
      expect(r.steps[2]!.stdout).toBe('after\n');
    },
  },
  {
    name: 'a shell fork bomb whose processes stay; a command started meanwhile runs',
    steps: [
      { cmd: 'bomb() { bomb | bomb & sleep 30; }; bomb', timeoutMs: 8000, background: true },
      { cmd: 'echo ok', timeoutMs: 10_000, delayMs: 2500 },
      { cmd: 'echo after', timeoutMs: 10_000, delayMs: 6500 },
    ],
    check: (r, who) => {
      // The first shell exits when its own fork is refused; the bomb's processes stay.
      sessionSurvived(r, [], who);
      expect(r.steps[1]!.stdout).toBe('ok\n');
      expect(r.steps[2]!.stdout).toBe('after\n');
    },
  },
  {
    name: 'a thread bomb that keeps its threads; a command started meanwhile runs',
    steps: [
      {
        cmd: py(
          'import threading, time\nn = 0\ntry:\n    while True:\n        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n        n += 1\nexcept RuntimeError:\n    pass\nprint(n, flush=True)\ntime.sleep(60)',
        ),
        timeoutMs: 8000,
        background: true,
      },
      { cmd: 'echo ok', timeoutMs: 10_000, delayMs: 2500 },
      { cmd: 'echo after', timeoutMs: 10_000, delayMs: 6500 },
    ],
    check: (r, who) => {
      sessionSurvived(r, [0], who);
      expect(r.steps[1]!.stdout).toBe('ok\n');
      expect(r.steps[2]!.stdout).toBe('after\n');
    },
  },
  {
    name: 'a bomb left running in the background by a command that returned; later commands run',
    steps: [
      {
        cmd: [
          'sh',
          '-c',
          `setsid ${FORK_AND_HOLD.map((a) => `'${a}'`).join(' ')} >/dev/null 2>&1 & sleep 2; echo left`,
        ],
        timeoutMs: 10_000,
      },
      { cmd: 'echo ok', timeoutMs: 10_000 },
      { cmd: 'echo again', timeoutMs: 10_000 },
    ],
    check: (r, who) => {
      sessionSurvived(r, [], who);
      expect(r.steps[0]!.stdout).toBe('left\n');
      expect(r.steps[1]!.stdout).toBe('ok\n');
      expect(r.steps[2]!.stdout).toBe('again\n');
    },
  },
  {
    name: 'two bombs at once fill the whole sandbox: the next command waits for a process, then fails clearly',
    steps: [
      { cmd: FORK_AND_HOLD, timeoutMs: 9000, background: true },
      { cmd: FORK_AND_HOLD, timeoutMs: 9000, background: true, delayMs: 300 },
      { cmd: 'echo ok', timeoutMs: 10_000, delayMs: 2500 },
      { cmd: 'echo after', timeoutMs: 10_000, delayMs: 7000 },
    ],
    check: (r, who) => {
      sessionSurvived(r, [0, 1], who);
      const blocked = r.steps[2]!;
      // Where cgroups count the sandbox's processes, the supervisor's own fork is refused too; elsewhere
      // (RLIMIT_NPROC, which binds only the commands) the command runs.
      if (who.cgroups) {
        expect(blocked.exitCode).toBe(126);
        expect(blocked.stderr).toMatch(/cannot start sh: .*pids limit.*retried/);
        expect(blocked.durationMs).toBeGreaterThan(1500);
      } else if (blocked.exitCode !== 0) {
        expect(blocked.exitCode).toBe(126);
        expect(blocked.stderr).toMatch(/pids limit/);
      }
      expect(r.steps[3]!.stdout).toBe('after\n');
    },
  },
];
describe.each(users)("a command's fork bomb cannot starve its session, as %s", (_who, asOther) => {
  let results: Map<string, CaseResult>;
  beforeAll(async () => {
    results = await attacks(
      starveCases.map((c) => ({ name: c.name, limits: { pids: STARVE_PIDS }, steps: c.steps })),
      asOther,
    );
  }, 600_000);

  it.each(starveCases)('$name', ({ name, check }) => {
    const r = results.get(name)!;
    check(r, { cgroups: isRoot && !asOther });
  });
});

/** Commands that try to outlive their exec: each must be dead when its exec returns. */
