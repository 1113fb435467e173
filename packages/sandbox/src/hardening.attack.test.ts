import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttackCase, CaseResult } from './__fixtures__/attacks.js';
import {
  attacks,
  bombContained,
  MiB,
  MONITOR,
  py,
  removeDirs,
  tag,
  users,
  withDocker,
} from './__fixtures__/hardening.js';
import { isRoot } from './__fixtures__/support.js';
import { DEFAULT_LIMITS } from './limits.js';

afterAll(removeDirs);

/** Limit cases: each runs on a sandbox created with no limits at all (the defaults). */
const limitCases: Array<{
  name: string;
  /** Also run against docker (the engine enforces these with the same kernel mechanisms as above). */
  docker?: boolean | undefined;
  steps: (t: number) => AttackCase['steps'];
  check: (r: CaseResult, who: { nonRoot: boolean; docker: boolean }) => void;
}> = [
  {
    name: 'a process flood (1,000 sleeps from python) stops at the pids limit',
    docker: true,
    steps: (t) => [
      {
        cmd: py(
          `import os, time\nn = 0\ntry:\n    for i in range(1000):\n        if os.fork() == 0:\n            os.execvp("sleep", ["sleep", "${t}"])\n        n += 1\nexcept OSError:\n    pass\nprint(n, flush=True)\ntime.sleep(60)`,
        ),
        // Room for ~500 forks on a loaded machine (about 9 s at a load of 40 on 2 cores).
        timeoutMs: 20_000,
      },
      { cmd: 'echo ok', timeoutMs: 20_000 },
    ],
    check: (r) => {
      // The flood was stopped (it printed how far it got), short of 1,000.
      expect(r.steps[0]!.stdout.trim()).toMatch(/^\d+$/);
      expect(Number(r.steps[0]!.stdout.trim())).toBeLessThan(DEFAULT_LIMITS.pids!);
      expect(r.steps[0]!.timedOut).toBe(true);
      expect(r.steps[0]!.survivors).toBe(0);
      expect(r.steps[1]!.stdout, JSON.stringify(r.steps[1])).toBe('ok\n');
    },
  },
  {
    name: 'a shell flood of 3,000 background sleeps cannot pass the pids limit',
    steps: (t) => [
      {
        cmd: `i=0; while [ $i -lt 3000 ]; do sleep ${t} & i=$((i+1)); done; echo started $i; sleep 60`,
        timeoutMs: 20_000,
      },
      { cmd: 'echo ok', timeoutMs: 20_000 },
    ],
    check: (r) => {
      // The flood ends at "Cannot fork"; had it not been limited, it would report 3000.
      expect(r.steps[0]!.stdout).not.toContain('started 3000');
      expect(`${r.steps[0]!.stderr}`).toMatch(/fork|Resource temporarily unavailable/i);
      expect(r.steps[1]!.stdout, JSON.stringify(r.steps[1])).toBe('ok\n');
    },
  },
  {
    name: 'a fork bomb whose processes stay (sh function) stops at the pids limit; the sandbox stays usable',
    docker: true,
    steps: () => [
      // Every bomb process waits, so the bomb fills the sandbox until its timeout ends it.
      { cmd: `${MONITOR} bomb() { bomb | bomb & sleep 20; }; bomb`, timeoutMs: 6000 },
      { cmd: 'echo ok; cat /testbed/max', timeoutMs: 30_000 },
    ],
    check: (r) => bombContained(r),
  },
  {
    name: 'a bash fork bomb (:(){ :|:& sleep 20; };:) stops at the pids limit',
    steps: () => [
      { cmd: ['bash', '-c', `${MONITOR} :(){ :|:& sleep 20; };:`], timeoutMs: 6000 },
      { cmd: 'echo ok; cat /testbed/max', timeoutMs: 30_000 },
    ],
    check: (r) => bombContained(r),
  },
  {
    name: 'a thread bomb stops at the pids limit',
    docker: true,
    steps: () => [
      {
        cmd: py(
          'import threading, time\nn = 0\ntry:\n    for i in range(3000):\n        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\nexcept RuntimeError:\n    pass\nprint(n, flush=True)',
        ),
        timeoutMs: 20_000,
      },
    ],
    check: (r) => {
      expect(r.steps[0]!.stdout.trim()).toMatch(/^\d+$/);
      expect(Number(r.steps[0]!.stdout.trim())).toBeLessThan(DEFAULT_LIMITS.pids!);
    },
  },
  {
    name: 'a 3 GiB read into memory in python fails',
    docker: true,
    steps: () => [
      { cmd: py('x = open("/dev/zero", "rb").read(3 << 30)\nprint("allocated", len(x))'), timeoutMs: 60_000 },
    ],
    check: (r) => {
      expect(r.steps[0]!.stdout).not.toContain('allocated');
      expect(r.steps[0]!.exitCode).not.toBe(0);
    },
  },
  {
    name: 'a shell memory hog (dd with a 3 GiB buffer) fails',
    docker: true,
    steps: () => [{ cmd: 'dd if=/dev/zero of=/dev/null bs=3G count=1 2>&1; echo rc=$?', timeoutMs: 60_000 }],
    check: (r) => {
      expect(r.steps[0]!.stdout).not.toMatch(/rc=0|copied/);
    },
  },
  {
    name: 'three processes of 800 MiB each exceed the sandbox memory together',
    steps: () => [
      {
        // Each holds its memory until all three hold theirs (bounded), so they overlap however slow the host.
        cmd: [
          'sh',
          '-c',
          'for i in 1 2 3; do (python3 -c "$1"; echo rc=$?) & done; wait',
          'sh',
          [
            'import os, time',
            'x = open("/dev/zero", "rb").read(800 << 20)',
            'open(f"/tmp/held.{os.getpid()}", "w").close()',
            'deadline = time.time() + 30',
            'while time.time() < deadline and sum(n.startswith("held.") for n in os.listdir("/tmp")) < 3:',
            '    time.sleep(0.05)',
          ].join('\n'),
        ],
        timeoutMs: 60_000,
      },
    ],
    check: (r, who) => {
      const codes = r.steps[0]!.stdout.trim().split('\n');
      expect(codes).toHaveLength(3);
      // Without a memory cgroup, memory is bounded per process (RLIMIT_DATA) and the provider says so.
      if (who.nonRoot) expect(r.warnings.join('\n')).toMatch(/memoryBytes=\d+ is enforced per process/);
      else expect(codes.filter((c) => c !== 'rc=0').length).toBeGreaterThan(0);
    },
  },
  {
    name: 'filling /tmp stops at its size',
    docker: true,
    steps: () => [
      {
        cmd: 'head -c 1073741824 /dev/zero > /tmp/fill; echo rc=$?; stat -c %s /tmp/fill',
        timeoutMs: 60_000,
      },
    ],
    check: (r) => {
      expect(r.steps[0]!.stdout).not.toContain('rc=0');
      expect(Number(r.steps[0]!.stdout.trim().split('\n').at(-1))).toBeLessThanOrEqual(
        DEFAULT_LIMITS.tmpBytes!,
      );
    },
  },
  {
    name: 'filling /dev/shm, or /dev itself, fails',
    docker: true,
    steps: () => [
      {
        cmd: 'head -c 1073741824 /dev/zero > /dev/shm/fill; echo rc=$?; stat -c %s /dev/shm/fill',
        timeoutMs: 60_000,
      },
      { cmd: 'head -c 1048576 /dev/zero > /dev/fill && echo WROTE-DEV; echo done', timeoutMs: 20_000 },
    ],
    check: (r) => {
      expect(r.steps[0]!.stdout).not.toContain('rc=0');
      expect(Number(r.steps[0]!.stdout.trim().split('\n').at(-1))).toBeLessThanOrEqual(
        DEFAULT_LIMITS.tmpBytes!,
      );
      expect(r.steps[1]!.stdout).not.toContain('WROTE-DEV');
    },
  },
  {
    name: 'python writing /tmp until it fails writes at most its size',
    steps: () => [
      {
        cmd: py(
          'n = 0\ntry:\n    with open("/tmp/big", "wb") as f:\n        for i in range(1024):\n            f.write(b"x" * (1 << 20)); f.flush(); n += 1\nexcept OSError as e:\n    pass\nprint(n)',
        ),
        timeoutMs: 60_000,
      },
    ],
    check: (r) => {
      expect(Number(r.steps[0]!.stdout.trim())).toBeLessThanOrEqual(DEFAULT_LIMITS.tmpBytes! / MiB);
    },
  },
  {
    name: 'opening files until it fails stops at the open-files limit, in every process',
    docker: true,
    steps: () => [
      {
        cmd: 'for i in 1 2 3 4; do python3 -c "\nfs = []\ntry:\n    while True: fs.append(open(\\"/dev/null\\"))\nexcept OSError:\n    print(len(fs))" & done; wait',
        timeoutMs: 60_000,
      },
    ],
    check: (r) => {
      const counts = r.steps[0]!.stdout.trim().split('\n').map(Number);
      expect(counts).toHaveLength(4);
      for (const n of counts) expect(n).toBeLessThan(DEFAULT_LIMITS.openFiles!);
    },
  },
  {
    name: 'a file larger than the file-size limit cannot be made (truncate, dd seek)',
    docker: true,
    steps: () => [
      { cmd: 'truncate -s 2G big 2>&1; echo rc=$?', timeoutMs: 20_000 },
      { cmd: 'dd if=/dev/zero of=big2 bs=1M seek=1500 count=1 2>&1; echo rc=$?', timeoutMs: 20_000 },
    ],
    check: (r) => {
      expect(r.steps[0]!.stdout).not.toMatch(/rc=0$/m);
      expect(r.steps[1]!.stdout).not.toMatch(/rc=0$/m);
    },
  },
  {
    name: 'every process gets the CPU-time limit',
    docker: true,
    steps: () => [{ cmd: 'ulimit -t', timeoutMs: 20_000 }],
    check: (r) => {
      expect(r.steps[0]!.stdout.trim()).toBe(String(DEFAULT_LIMITS.cpuSeconds));
    },
  },
];

const limitTags = new Map(limitCases.map((c) => [c.name, tag()]));
const LIMITS_SEEN = 'ulimit -t; ulimit -n; df -k /tmp | tail -1';
const noneCase: AttackCase = {
  name: "limits: 'none'",
  limits: 'none',
  steps: [{ cmd: LIMITS_SEEN, timeoutMs: 20_000 }],
};
const defaultCase: AttackCase = { name: 'no limits given', steps: [{ cmd: LIMITS_SEEN, timeoutMs: 20_000 }] };

describe.each(users)('default limits on bubblewrap, as %s', (_who, asOther) => {
  let results: Map<string, CaseResult>;
  beforeAll(async () => {
    const cases = limitCases.map((c) => {
      const t = limitTags.get(c.name)!;
      return { name: c.name, steps: c.steps(t), tags: [t] };
    });
    results = await attacks([...cases, noneCase, defaultCase], asOther);
  }, 600_000);

  it.each(limitCases)('$name', ({ name, check }) => {
    const r = results.get(name)!;
    check(r, { nonRoot: asOther || !isRoot, docker: false });
    expect(r.survivorsAfterTerminate).toBe(0);
    // As root every default limit is enforced in full: nothing to warn about.
    if (isRoot && !asOther) expect(r.warnings, JSON.stringify(r)).toEqual([]);
  });

  it("limits: 'none' opts out explicitly, where no limits given means the defaults", () => {
    const seen = (c: AttackCase) => {
      const [cpu, nofile, df] = results.get(c.name)!.steps[0]!.stdout.trim().split('\n');
      return { cpu, nofile: Number(nofile), tmp: Number(df!.trim().split(/\s+/)[1]) * 1024 };
    };
    expect(seen(defaultCase)).toEqual({
      cpu: String(DEFAULT_LIMITS.cpuSeconds),
      nofile: DEFAULT_LIMITS.openFiles,
      tmp: DEFAULT_LIMITS.tmpBytes,
    });
    const none = seen(noneCase);
    expect(none.cpu).toBe('unlimited');
    expect(none.nofile).toBeGreaterThan(DEFAULT_LIMITS.openFiles!);
    expect(none.tmp).toBeGreaterThan(DEFAULT_LIMITS.tmpBytes!);
  });
});

describe.runIf(withDocker)('default limits on docker', () => {
  it.each(limitCases.filter((c) => c.docker))('$name', async ({ name, steps, check }) => {
    const t = tag();
    const r = (await attacks([{ name, backend: 'docker', steps: steps(t), tags: [t] }], false)).get(name)!;
    check(r, { nonRoot: false, docker: true });
    expect(r.survivorsAfterTerminate).toBe(0);
  });
});

/** Forks until the sandbox refuses, keeps every process, and says how many it got. */
const survivorCases: Array<{
  name: string;
  steps: (t: number[]) => AttackCase['steps'];
  check?: ((r: CaseResult) => void) | undefined;
}> = [
  {
    name: 'drops the exec marker (env -u) and detaches with setsid',
    steps: (t) => [{ cmd: `env -u VIME_EXEC_ID setsid sleep ${t[0]} & sleep ${t[1]}`, timeoutMs: 1000 }],
  },
  {
    name: 'clears its environment (env -i) in a double-forked subshell',
    steps: (t) => [
      {
        cmd: `(env -i sleep ${t[0]} &); (env -i /bin/sh -c 'sleep ${t[1]}' &) ; sleep ${t[2]}`,
        timeoutMs: 1000,
      },
    ],
  },
  {
    name: 'setsid -f with a scrubbed environment, and nohup',
    steps: (t) => [
      {
        cmd: `setsid -f env -i sleep ${t[0]}; nohup env -i sh -c 'sleep ${t[1]}' >/dev/null 2>&1 & sleep ${t[2]}`,
        timeoutMs: 1000,
      },
    ],
  },
  {
    name: 'a python daemon: double fork, setsid, empty environment',
    steps: (t) => [
      {
        cmd: py(
          `import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execve("/bin/sleep", ["sleep", "${t[0]}"], {})\n    os._exit(0)\ntime.sleep(60)`,
        ),
        timeoutMs: 1000,
      },
    ],
  },
  {
    name: 'stops its supervisor (kill -STOP $PPID)',
    steps: (t) => [
      { cmd: `env -i setsid sleep ${t[0]} & kill -STOP $PPID; sleep ${t[1]}`, timeoutMs: 1000 },
      { cmd: 'echo ok', timeoutMs: 5000 },
    ],
    check: (r) => {
      expect(r.steps[1]!.stdout, JSON.stringify(r.steps[1])).toBe('ok\n');
      expect(r.steps[1]!.durationMs).toBeLessThan(5000);
    },
  },
  {
    name: 'stops its supervisor and exits at once; later commands still run',
    steps: () => [
      { cmd: 'kill -STOP $PPID', timeoutMs: 1500 },
      { cmd: 'echo ok', timeoutMs: 5000 },
      { cmd: 'echo again', timeoutMs: 5000 },
    ],
    check: (r) => {
      expect(r.steps[1]!.stdout, JSON.stringify(r.steps[1])).toBe('ok\n');
      expect(r.steps[2]!.stdout).toBe('again\n');
    },
  },
  {
    name: 'keeps stopping its supervisor from a detached loop',
    steps: (t) => [
      {
        cmd: `p=$PPID; env -i setsid sh -c "while :; do kill -STOP $p; sleep 0.05; done" & sleep ${t[0]}`,
        timeoutMs: 1000,
      },
      { cmd: 'echo ok', timeoutMs: 5000 },
    ],
    check: (r) => expect(r.steps[1]!.stdout).toBe('ok\n'),
  },
  {
    name: 'kills its supervisor (kill -9 $PPID)',
    steps: (t) => [
      { cmd: `env -i setsid sleep ${t[0]} & kill -9 $PPID; sleep ${t[1]}`, timeoutMs: 5000 },
      { cmd: 'echo ok', timeoutMs: 10_000 },
    ],
    check: (r) => {
      // Reported as killed, like any command whose process died by SIGKILL: never an infrastructure error.
      expect(r.steps[0]!.error).toBeUndefined();
      expect(r.steps[0]!.exitCode).toBe(137);
      // Ended by the kill, not held to its 5 s timeout.
      expect(r.steps[0]!.timedOut).toBe(false);
      expect(r.steps[1]!.stdout, JSON.stringify(r.steps[1])).toBe('ok\n');
    },
  },
  {
    name: 'is aborted after detaching with a scrubbed environment',
    steps: (t) => [
      { cmd: `env -i setsid sleep ${t[0]} & (env -i sleep ${t[1]} &); sleep ${t[2]}`, abortMs: 800 },
    ],
    check: (r) => {
      expect(r.steps[0]!.error?.message).toContain('aborted by the test');
    },
  },
  {
    name: 'is aborted after stopping its supervisor',
    steps: (t) => [
      { cmd: `env -i setsid sleep ${t[0]} & kill -STOP $PPID; sleep ${t[1]}`, abortMs: 800 },
      { cmd: 'echo ok', timeoutMs: 5000 },
    ],
    check: (r) => {
      expect(r.steps[0]!.error?.message).toContain('aborted by the test');
      expect(r.steps[1]!.stdout, JSON.stringify(r.steps[1])).toBe('ok\n');
    },
  },
];

const backends: Array<[string, AttackCase['backend']]> = [
  ['session', 'bubblewrap'],
  ['per-exec', 'bubblewrap-per-exec'],
];

describe.each(users)('timeouts and aborts kill everything an exec started, as %s', (_who, asOther) => {
  // Per-exec mode is the same mechanism for every user (bwrap's pid namespace dies with it): once is enough.
  describe.each(asOther ? backends.slice(0, 1) : backends)('bubblewrap %s', (mode, backend) => {
    const tags = new Map(survivorCases.map((c) => [c.name, [tag(), tag(), tag()]]));
    let results: Map<string, CaseResult>;
    beforeAll(async () => {
      results = await attacks(
        survivorCases.map((c) => ({
          name: c.name,
          backend,
          steps: c.steps(tags.get(c.name)!),
          tags: tags.get(c.name)!,
        })),
        asOther,
      );
    }, 600_000);

    it.each(survivorCases)('$name', ({ name, steps, check }) => {
      const r = results.get(name)!;
      const first = r.steps[0]!;
      const limit = steps([0, 0, 0])[0]!;
      expect(first.hung).toBe(false);
      // Ended by its timeout or abort (plus the kill), whatever the command did: its sleeps last days, so a
      // margin of ten deadlines tells that from a hang on a loaded machine.
      expect(first.durationMs).toBeLessThan(10 * (limit.timeoutMs ?? limit.abortMs!));
      const endsByItself = mode === 'per-exec' && /exits at once/.test(name);
      if (first.error === undefined && first.exitCode !== 137 && !endsByItself)
        expect(first.timedOut).toBe(true);
      for (const s of r.steps) expect(s.survivors).toBe(0);
      // Per-exec mode has no supervisor: $PPID is bwrap's init, which ignores the command's signals.
      if (mode === 'session' || !/kills its supervisor/.test(name)) check?.(r);
      expect(r.survivorsAfterTerminate).toBe(0);
    });
  });
});
