/**
 * daytonaProvider against a STAND-IN for Daytona's servers (src/standins/daytona.ts): a loopback HTTP server
 * answering the routes of Daytona's generated API and toolbox clients, built from their OpenAPI specs, that
 * runs commands as local processes under a temp root per sandbox. The `@daytonaio/sdk` itself is unmodified;
 * it is pointed at the stand-in (`apiUrl`) and polls instead of using its socket.io event stream, which the
 * stand-in does not serve.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { type Sandbox, SandboxRateLimited } from '@vime/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostedRateLimitError } from '../errors.js';
import { noProcessRunning, waitFor } from '../int-test-support.js';
import type { HostedProvider } from '../provider.js';
import { type DaytonaStandin, startDaytonaStandin } from '../standins/daytona.js';
import { type DaytonaProviderOptions, daytonaProvider } from './provider.js';

const connect = (standin: DaytonaStandin, more: Partial<DaytonaProviderOptions> = {}) =>
  daytonaProvider({
    apiKey: standin.apiKey,
    apiUrl: standin.url,
    target: 'us',
    sdk: { useDeprecatedPolling: true },
    ...more,
  });

describe('daytonaProvider against the Daytona stand-in (API + toolbox)', () => {
  let standin: DaytonaStandin;
  let provider: HostedProvider;
  let sbx: Sandbox;

  beforeAll(async () => {
    standin = await startDaytonaStandin({ msPerMinute: 1000 });
    provider = connect(standin);
    sbx = await provider.create({
      workdir: '/testbed',
      env: { GREETING: 'hello' },
      labels: { 'vime.run': 'daytona-test' },
      lifetimeMs: 60 * 60_000, // 60 "minutes": a minute is a second in this stand-in
    });
  });
  afterAll(async () => {
    await sbx?.terminate();
    await standin?.close();
  });

  it('creates with the run label as Daytona labels, ttlMinutes as the lifetime and auto-stop off', () => {
    expect(sbx.provider).toBe('daytona');
    const box = [...standin.boxes.values()][0]!;
    expect(box.labels['vime.run']).toBe('daytona-test');
    expect(box.labels['vime.sandbox']).toBe(sbx.id);
    expect(box.ttlMinutes).toBe(60);
    expect(box.autoStopInterval).toBe(0);
    expect(existsSync(box.path('/testbed'))).toBe(true);
  });

  it('runs shell strings and argv with exit codes, separate stdout and stderr, env, cwd and stdin', async () => {
    const r = await sbx.exec('echo out; echo err >&2; echo $GREETING $EXTRA; exit 3', {
      env: { EXTRA: 'x' },
    });
    expect(r).toMatchObject({ exitCode: 3, stdout: 'out\nhello x\n', stderr: 'err\n', timedOut: false });
    expect((await sbx.exec(['printf', '%s|', 'a b', '$HOME', ';ls'])).stdout).toBe('a b|$HOME|;ls|');
    await sbx.exec('mkdir -p sub/dir');
    expect((await sbx.exec('pwd', { cwd: 'sub/dir' })).stdout).toBe('/testbed/sub/dir\n');
    expect((await sbx.exec(['wc', '-c'], { stdin: 'x'.repeat(12345) })).stdout.trim()).toBe('12345');
  });

  it('times out, killing detached children too, and stays usable', async () => {
    const r = await sbx.exec('setsid sleep 300 & echo started; sleep 30', { timeoutMs: 500 });
    expect(r.timedOut).toBe(true);
    expect(r.exitCode).toBeNull();
    const box = [...standin.boxes.values()][0]!;
    await waitFor('no process of the timed-out exec left', () => noProcessRunning(box.id, ['sleep', '300']));
    expect((await sbx.exec('echo still-usable')).stdout).toBe('still-usable\n');
  });

  it('aborts a running exec with the caller signal, killing its processes', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('stop')), 300);
    await expect(sbx.exec('sleep 31', { signal: controller.signal })).rejects.toThrow('stop');
    await waitFor('the aborted command to be killed', () =>
      noProcessRunning([...standin.boxes.values()][0]!.id, ['sleep', '31']),
    );
  });

  it('caps large output keeping head and tail, and emits exec events', async () => {
    const seen: Array<{ id: string; exitCode: number | null }> = [];
    const listener = (e: { id: string; exitCode: number | null }) => seen.push(e);
    provider.events.on('exec', listener);
    const r = await sbx.exec('seq 1 200000', { maxOutputBytes: 4096 });
    provider.events.off('exec', listener);
    expect(r.truncated).toBe(true);
    expect(r.stdout.startsWith('1\n2\n3\n')).toBe(true);
    expect(r.stdout.endsWith('199999\n200000\n')).toBe(true);
    expect(r.stdout).toContain('bytes elided');
    expect(seen).toContainEqual(expect.objectContaining({ id: sbx.id, exitCode: 0 }));
  });

  it('moves files both ways, caps read-backs and fails a missing read with a SandboxError', async () => {
    const bytes = new Uint8Array([0, 1, 2, 255, 254, 10, 13, 45, 45]);
    await sbx.writeFile('deep/er/bin.dat', bytes);
    expect(Array.from(await sbx.readFile('/testbed/deep/er/bin.dat'))).toEqual(Array.from(bytes));
    await sbx.writeFile('run.sh', '#!/bin/sh\necho ran\n', { mode: 0o755 });
    expect((await sbx.exec('./run.sh')).stdout).toBe('ran\n');
    await sbx.writeFile('/tmp/agent.diff', 'from the host\n');
    expect((await sbx.exec('cat /tmp/agent.diff')).stdout).toBe('from the host\n');
    await sbx.exec('echo from the sandbox > /tmp/made.txt');
    expect(await sbx.readTextFile('/tmp/made.txt')).toBe('from the sandbox\n');
    await sbx.exec('head -c 5000 /dev/zero > big.bin');
    await expect(sbx.readFile('big.bin', { maxBytes: 1000 })).rejects.toMatchObject({
      code: 'file_too_large',
    });
    await expect(sbx.readFile('missing.txt')).rejects.toSatisfy((e) => SandboxError.isInstance(e));
  });

  it('copies a host folder in (a git repository)', async () => {
    const src = mkdtempSync(join(tmpdir(), 'vime-copyin-'));
    writeFileSync(join(src, 'calc.py'), 'def add(a, b):\n    return a + b\n');
    execFileSync('git', ['init', '-q', src]);
    execFileSync('git', ['-C', src, 'add', '-A']);
    execFileSync('git', ['-C', src, '-c', 'user.email=t@e', '-c', 'user.name=t', 'commit', '-qm', 'init']);
    await sbx.copyIn(src, '/testbed/repo');
    const r = await sbx.exec('git status --porcelain && git log --oneline | wc -l && ls -a', {
      cwd: '/testbed/repo',
      env: { HOME: '/tmp' },
    });
    expect(r.exitCode, r.output).toBe(0);
    expect(r.stdout).toMatch(/^1\n/);
    expect(r.stdout).toContain('calc.py');
    expect(r.stdout).not.toContain('.vime-copyin');
    rmSync(src, { recursive: true, force: true });
  });

  it('terminates: the sandbox is deleted at Daytona, isAlive is false, terminate is idempotent', async () => {
    const other = await provider.create({ workdir: '/w', labels: { 'vime.run': 'daytona-test' } });
    const vendorId = [...standin.boxes.values()].find((b) => b.labels['vime.sandbox'] === other.id)!.id;
    expect(await other.isAlive()).toBe(true);
    await Promise.all([other.terminate(), other.terminate()]);
    expect(standin.boxes.has(vendorId)).toBe(false);
    expect(await other.isAlive()).toBe(false);
  });

  it("sets Daytona's ttlMinutes, which ends a sandbox nobody terminates (the leak backstop)", async () => {
    // No spec.lifetimeMs: no timer in this process, only Daytona's ttl (1 minute; a second in the stand-in).
    const short = connect(standin, { defaultLifetimeMs: 1000, handleSignals: false });
    const leaked = await short.create({ workdir: '/w', labels: { 'vime.run': 'daytona-lifetime' } });
    expect(await leaked.isAlive()).toBe(true);
    await waitFor('Daytona ttl to end the sandbox', async () => !(await leaked.isAlive()));
  });

  it('reaps a run by its label, leaving live owners unless told, and other runs alone', async () => {
    const a1 = await provider.create({ workdir: '/w', labels: { 'vime.run': 'daytona-reap' } });
    const keep = await provider.create({ workdir: '/w', labels: { 'vime.run': 'daytona-other' } });
    const first = await provider.reapOrphans('daytona-reap');
    expect(first).toMatchObject({ removed: [], skippedLive: 1 });
    const second = await provider.reapOrphans({ run: 'daytona-reap', includeLive: true });
    expect(second.removed.map((r) => r.id)).toEqual([a1.id]);
    expect(await a1.isAlive()).toBe(false);
    expect(await keep.isAlive()).toBe(true);
    await keep.terminate();
    await a1.terminate();
  });
});

describe('daytonaProvider rate limit against the Daytona stand-in (429 + Retry-After)', () => {
  it("surfaces a 429 as HostedRateLimitError carrying the vendor's Retry-After", async () => {
    const standin = await startDaytonaStandin({ createsPerSecond: 1, retryAfterSeconds: 2 });
    const provider = connect(standin);
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 12 }, () =>
          provider.create({ workdir: '/w', labels: { 'vime.run': 'daytona-429' } }),
        ),
      );
      const refused = results
        .filter((r) => r.status === 'rejected')
        .map((r) => (r as PromiseRejectedResult).reason);
      expect(refused.length).toBeGreaterThan(0);
      expect(standin.rateLimited).toBe(refused.length);
      for (const e of refused) {
        expect(HostedRateLimitError.isInstance(e), String(e)).toBe(true);
        // the one rate-limit error a fleet honours
        expect(SandboxRateLimited.isInstance(e)).toBe(true);
        expect(e).toMatchObject({
          vendor: 'daytona',
          operation: 'create',
          code: 'rate_limited',
          retryAfterMs: 2000,
          retryAfterSource: 'vendor',
        });
      }
      for (const r of results) if (r.status === 'fulfilled') await r.value.terminate();
    } finally {
      await standin.close();
    }
  });
});
