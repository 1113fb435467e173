/**
 * The escape suite: what an untrusted command must not be able to do, run against every isolating
 * backend (bubblewrap always; docker, which scripts/docker-up.sh starts and CI always has as root).
 */
import { randomInt } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostSleepers } from './__fixtures__/support.js';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { dockerProvider } from './docker/provider.js';
import { findCgroups, removeCgroupTreeSync } from './host/cgroups.js';
import { dockerForTests, testImage } from './testing.js';
import type { Sandbox, SandboxProvider, SandboxSpec } from './types.js';

const rootDir = mkdtempSync(join(tmpdir(), 'vime-escape-test-'));
afterAll(() => rmSync(rootDir, { recursive: true, force: true }));
const isRoot = process.getuid?.() === 0;
const backends: Array<[string, () => SandboxProvider, Partial<SandboxSpec>]> = [
  ['bubblewrap', () => bubblewrapProvider({ rootDir }), {}],
  ['bubblewrap (per-exec)', () => bubblewrapProvider({ rootDir, execMode: 'per-exec' }), {}],
];
if (dockerForTests()) backends.push(['docker', () => dockerProvider(), { image: testImage }]);

async function eventually(check: () => boolean, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

describe.each(backends)('escape suite: %s', (_name, makeProvider, extra) => {
  let provider: SandboxProvider;
  let sbx: Sandbox;
  let server: Server;
  let port = 0;
  let connections = 0;

  beforeAll(async () => {
    provider = makeProvider();
    sbx = await provider.create({ workdir: '/testbed', ...extra });
    server = createServer((socket) => {
      connections++;
      socket.end('secret-from-host\n');
    });
    await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', resolve));
    port = (server.address() as { port: number }).port;
  });
  afterAll(async () => {
    server?.close();
    await sbx?.terminate();
  });

  it('has no network egress: neither loopback services of the host nor outside addresses', async () => {
    const hostIps = Object.values(networkInterfaces())
      .flat()
      .filter((i) => i && i.family === 'IPv4')
      .map((i) => i!.address);
    const targets = [...new Set(['127.0.0.1', ...hostIps, '1.1.1.1'])];
    const script = [
      'import socket, sys',
      `for host in ${JSON.stringify(targets)}:`,
      '    try:',
      `        s = socket.create_connection((host, ${port}), timeout=3)`,
      '        print("CONNECTED", host, s.recv(100))',
      '    except OSError as e:',
      '        print("blocked", host, type(e).__name__)',
    ].join('\n');
    const r = await sbx.exec(['python3', '-c', script]);
    expect(r.exitCode, r.output).toBe(0);
    expect(r.stdout).not.toContain('CONNECTED');
    expect(r.stdout.match(/^blocked/gm)).toHaveLength(targets.length);
    expect(connections).toBe(0);
    const dns = await sbx.exec(['python3', '-c', 'import socket; socket.getaddrinfo("deb.debian.org", 80)']);
    expect(dns.exitCode).not.toBe(0);
  });

  it('cannot write outside its work dir', async () => {
    const tag = `vime-escape-${randomInt(1e9)}`;
    const r = await sbx.exec(
      `for p in /usr /etc /usr/lib / /root /var /sbin; do touch "$p/${tag}" 2>/dev/null && echo "WROTE $p"; done; ` +
        `mount -o remount,rw /usr 2>/dev/null && echo REMOUNTED; ` +
        `echo hacked > /proc/sys/kernel/hostname 2>/dev/null && echo SYSCTL; ` +
        `touch /tmp/${tag} && echo tmp-ok; touch /testbed/${tag} && echo work-ok`,
    );
    expect(r.stdout).not.toMatch(/WROTE|REMOUNTED|SYSCTL/);
    expect(r.stdout).toContain('work-ok');
    for (const p of ['/usr', '/etc', '/usr/lib', '/', '/root', '/var', '/tmp']) {
      expect(existsSync(join(p, tag)), `host ${p}/${tag}`).toBe(false);
    }
  });

  it('cannot read host secrets or another sandbox', async () => {
    const secret = `host-secret-${randomInt(1e9)}`;
    const secretFile = join(rootDir, 'secret.txt');
    writeFileSync(secretFile, secret, { mode: 0o600 });
    const other = await provider.create({ workdir: '/testbed', ...extra });
    try {
      await other.writeFile('secret.txt', `other-${secret}`);
      const r = await sbx.exec(
        `cat /etc/shadow; cat ${secretFile}; cat /root/.bash_history; ls -a /tmp /home 2>/dev/null; ` +
          `grep -rs "${secret}" /testbed /tmp /home /root /var /etc 2>/dev/null; ps -e -o comm= | wc -l`,
      );
      expect(r.output).not.toContain(secret);
      expect(r.output).not.toMatch(/^root:[^x]/m);
      // Only its own processes are visible (a private pid namespace).
      expect(Number(r.stdout.trim().split('\n').at(-1))).toBeLessThan(10);
    } finally {
      await other.terminate();
    }
  });

  it('cannot reach the channel that reports results (ptrace, /proc fds)', async () => {
    // A background process must not be able to forge the output or exit code of a later command (the
    // grading run). List every pipe or socket held by a process this command can ptrace, except its own.
    const script = [
      'import ctypes, os',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'own = set(os.readlink("/proc/self/fd/%d" % i) for i in (0, 1, 2))',
      'for p in sorted(int(x) for x in os.listdir("/proc") if x.isdigit()):',
      '    if p in (os.getpid(), os.getppid()):',
      '        continue',
      '    attached = libc.ptrace(16, p, None, None) == 0',
      '    try:',
      '        fds = {fd: os.readlink("/proc/%d/fd/%s" % (p, fd)) for fd in os.listdir("/proc/%d/fd" % p)}',
      '    except OSError:',
      '        fds = {}',
      '    if attached:',
      '        libc.ptrace(17, p, None, None)',
      '    if not attached and not fds:',
      '        continue',
      '    cmd = open("/proc/%d/cmdline" % p).read().replace("\\0", " ").strip()[:40]',
      '    for fd, target in fds.items():',
      '        if target.startswith(("pipe:", "socket:")) and target not in own and not (p == 1 and fd == "2"):',
      '            print("%d %s fd %s %s" % (p, cmd, fd, target))',
    ].join('\n');
    const r = await sbx.exec(['python3', '-c', script]);
    expect(r.stderr).toBe('');
    const reachable = r.stdout.split('\n').filter(Boolean);
    if (_name === 'docker') {
      // Only the container's init and main process: their output goes to the container log, not to execs.
      for (const line of reachable) expect(line).toMatch(/^\d+ (\/sbin\/docker-init -- )?sleep infinity fd/);
    } else {
      expect(reachable).toEqual([]);
    }
  });

  it('contains a fork bomb (pids limit), then stays usable', async () => {
    const bounded = await provider.create({ workdir: '/testbed', limits: { pids: 64 }, ...extra });
    try {
      const r = await bounded.exec('bomb() { bomb | bomb & }; bomb; sleep 3; echo survived', {
        timeoutMs: 8000,
      });
      expect(r.durationMs).toBeLessThan(20_000);
      // The bomb's last processes can take a few seconds to go (docker kills them asynchronously); until
      // then the pids limit refuses a new command. Usable again within 30 s is what is checked.
      let after = await bounded.exec('echo ok', { timeoutMs: 20_000 });
      const deadline = Date.now() + 30_000;
      while (after.stdout !== 'ok\n' && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 1000));
        after = await bounded.exec('echo ok', { timeoutMs: 20_000 });
      }
      expect(after.stdout, JSON.stringify(after)).toBe('ok\n');
    } finally {
      await bounded.terminate();
    }
  });

  it('contains a memory bomb (memory limit)', async () => {
    const bounded = await provider.create({
      workdir: '/testbed',
      limits: { memoryBytes: 128 << 20 },
      ...extra,
    });
    try {
      const r = await bounded.exec(
        ['python3', '-c', 'a = []\nwhile True:\n    a.append(bytearray(16 << 20))'],
        { timeoutMs: 30_000 },
      );
      expect(r.timedOut).toBe(false);
      expect(r.exitCode).not.toBe(0);
      expect((await bounded.exec('echo ok')).stdout).toBe('ok\n');
    } finally {
      await bounded.terminate();
    }
  });

  it('timeout kills grandchildren and detached children', async () => {
    const base = 800_000 + randomInt(100_000);
    const tags = [base, base + 1, base + 2, base + 3, base + 4];
    const r = await sbx.exec(
      `sleep ${tags[0]} & setsid sleep ${tags[1]} & (sleep ${tags[2]} &); ` +
        `nohup sleep ${tags[3]} >/dev/null 2>&1 & sleep ${tags[4]}`,
      { timeoutMs: 1000 },
    );
    expect(r.timedOut, r.stderr).toBe(true);
    expect(await eventually(() => hostSleepers(tags).length === 0)).toBe(true);
  });

  it('handles non-UTF-8 bytes and 100 MB of output with bounded memory', async () => {
    const r = await sbx.exec(`yes "$(printf 'ok\\377')" | head -c 100000000; echo tail-marker`, {
      maxOutputBytes: 1 << 20,
      timeoutMs: 120_000,
    });
    expect(r.exitCode, r.stderr.slice(-500)).toBe(0);
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBeLessThan((1 << 20) + 200);
    expect(r.stdout.startsWith('ok\uFFFD\nok\uFFFD\n')).toBe(true);
    expect(r.stdout.endsWith('tail-marker\n')).toBe(true);
    expect(r.stdout).toMatch(/\[… \d+ bytes elided …\]/);
    const elided = Number(/\[… (\d+) bytes elided/.exec(r.stdout)![1]);
    expect(elided).toBe(100_000_000 + 'tail-marker\n'.length - (1 << 20));
  });
});

describe('escape suite: the bubblewrap per-exec launcher', () => {
  const provider = bubblewrapProvider({ rootDir, execMode: 'per-exec' });

  it("cannot forge a launch failure: exit 125 and fd 3 are the command's own", async () => {
    const sbx = await provider.create({ workdir: '/testbed' });
    try {
      const r = await sbx.exec('printf 1 >&3; exit 125');
      expect(r.exitCode).toBe(125);
      expect(r.stderr).toMatch(/3: Bad file descriptor/);
    } finally {
      await sbx.terminate();
    }
  });

  // Only root gets cgroups here (an unprivileged user has no writable one to join).
  it.runIf(isRoot)(
    'a launch that cannot join its cgroups is a SandboxError, not an exit code of the command',
    async () => {
      const broken = await provider.create({ workdir: '/testbed' });
      try {
        const cgroups = findCgroups((name) => name === `vime-${broken.id}`);
        expect(cgroups.length).toBeGreaterThan(0);
        // empty between execs; the owner mark is an empty child
        for (const cg of cgroups) expect(removeCgroupTreeSync(cg.dir)).toBe(true);
        const error = await broken.exec('echo never').catch((e: unknown) => e);
        expect(SandboxError.isInstance(error), String(error)).toBe(true);
        expect(String(error)).toMatch(
          /the launch failed before the command started \(exit 125\).*cgroup\.procs/,
        );
      } finally {
        await broken.terminate();
      }
    },
  );
});
