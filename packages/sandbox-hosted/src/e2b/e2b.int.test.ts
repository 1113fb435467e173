/**
 * e2bProvider against a STAND-IN for E2B's servers (src/standins/e2b.ts): a loopback HTTP server speaking
 * E2B's REST API and envd's Connect-RPC process service, built from E2B's published specs, that runs
 * commands as local processes in a temp folder per sandbox. The `e2b` SDK itself is unmodified; it is only
 * pointed at the stand-in (`apiUrl`, `sandboxUrl`).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { type Sandbox, SandboxRateLimited } from '@vime/sandbox';
import { Sandbox as E2bSandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostedRateLimitError } from '../errors.js';
import { noProcessRunning, waitFor } from '../int-test-support.js';
import type { HostedProvider } from '../provider.js';
import { type E2bStandin, startE2bStandin } from '../standins/e2b.js';
import { e2bProvider } from './provider.js';

describe('e2bProvider against the E2B stand-in (REST API + envd Connect-RPC)', () => {
  let standin: E2bStandin;
  let provider: HostedProvider;
  let sbx: Sandbox;

  beforeAll(async () => {
    standin = await startE2bStandin({ ratePerSecond: 1000 });
    provider = e2bProvider({ apiKey: standin.apiKey, apiUrl: standin.url, sandboxUrl: standin.url });
    sbx = await provider.create({
      workdir: '/testbed',
      image: 'swe-base',
      env: { GREETING: 'hello' },
      labels: { 'vime.run': 'e2b-test' },
      lifetimeMs: 10 * 60_000,
    });
  });
  afterAll(async () => {
    await sbx?.terminate();
    await standin?.close();
  });

  it('creates from the template with the run label as E2B metadata and the lifetime as its timeout', () => {
    expect(sbx.provider).toBe('e2b');
    expect(sbx.labels['vime.run']).toBe('e2b-test');
    const boxes = [...standin.boxes.values()];
    expect(boxes).toHaveLength(1);
    const box = boxes[0]!;
    expect(box.templateID).toBe('swe-base');
    expect(box.metadata['vime.run']).toBe('e2b-test');
    expect(box.metadata['vime.sandbox']).toBe(sbx.id);
    expect(box.endAt - box.createdAt).toBeGreaterThanOrEqual(10 * 60_000 - 1000);
    expect(existsSync(box.path('/testbed'))).toBe(true);
  });

  it('runs shell strings and argv with exit codes, env, cwd and stdin', async () => {
    const r = await sbx.exec('echo out; echo err >&2; echo $GREETING $EXTRA; exit 3', {
      env: { EXTRA: 'x' },
    });
    expect(r).toMatchObject({ exitCode: 3, stdout: 'out\nhello x\n', stderr: 'err\n', timedOut: false });
    const argv = await sbx.exec(['printf', '%s|', 'a b', '$HOME', ';ls']);
    expect(argv.stdout).toBe('a b|$HOME|;ls|');
    await sbx.exec('mkdir -p sub/dir');
    expect((await sbx.exec('basename "$PWD"', { cwd: 'sub/dir' })).stdout).toBe('dir\n');
    expect((await sbx.exec(['wc', '-c'], { stdin: 'x'.repeat(12345) })).stdout.trim()).toBe('12345');
  });

  it('times out, killing detached children too, and stays usable', async () => {
    const t0 = performance.now();
    const r = await sbx.exec('setsid sleep 300 & echo started; sleep 30', { timeoutMs: 500 });
    expect(r.timedOut).toBe(true);
    expect(r.exitCode).toBeNull();
    expect(r.stdout).toBe('started\n');
    expect(performance.now() - t0).toBeGreaterThanOrEqual(500);
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
    const bytes = new Uint8Array([0, 1, 2, 255, 254, 10]);
    await sbx.writeFile('deep/er/bin.dat', bytes);
    expect(Array.from(await sbx.readFile('/testbed/deep/er/bin.dat'))).toEqual(Array.from(bytes));
    await sbx.writeFile('run.sh', '#!/bin/sh\necho ran\n', { mode: 0o755 });
    expect((await sbx.exec('./run.sh')).stdout).toBe('ran\n');
    await sbx.exec('echo from the sandbox > made.txt');
    expect(await sbx.readTextFile('made.txt')).toBe('from the sandbox\n');
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
    await sbx.copyIn(src, 'repo');
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

  it('terminates: the sandbox is deleted at E2B, isAlive is false, terminate is idempotent', async () => {
    const other = await provider.create({ workdir: '/w', labels: { 'vime.run': 'e2b-test' } });
    const vendorId = [...standin.boxes.values()].find((b) => b.metadata['vime.sandbox'] === other.id)!.id;
    expect(await other.isAlive()).toBe(true);
    await Promise.all([other.terminate(), other.terminate()]);
    expect(standin.boxes.has(vendorId)).toBe(false);
    expect(await other.isAlive()).toBe(false);
    await expect(other.exec('true')).rejects.toMatchObject({ code: 'sandbox_terminated' });
  });

  it('a create aborted while E2B is answering rejects and leaves no sandbox there', async () => {
    // The stand-in makes the sandbox at once and answers 300 ms later; the abort lands in between.
    const slow = await startE2bStandin({ ratePerSecond: 1000, createDelayMs: 300 });
    try {
      const p = e2bProvider({ apiKey: slow.apiKey, apiUrl: slow.url, sandboxUrl: slow.url });
      const controller = new AbortController();
      const created = p.create({ workdir: '/w' }, { signal: controller.signal });
      await waitFor('the stand-in to make the sandbox', () => slow.boxes.size === 1);
      controller.abort(new Error('stop'));
      await expect(created).rejects.toThrow();
      await waitFor('the sandbox of the aborted create to be deleted', () => slow.boxes.size === 0);
    } finally {
      await slow.close();
    }
  });

  it("sets E2B's own timeout, which ends a sandbox nobody terminates (the leak backstop)", async () => {
    const short = e2bProvider({
      apiKey: standin.apiKey,
      apiUrl: standin.url,
      sandboxUrl: standin.url,
      defaultLifetimeMs: 1000,
      handleSignals: false,
    });
    // No spec.lifetimeMs: no timer in this process, only E2B's timeout (1 s).
    const leaked = await short.create({ workdir: '/w', labels: { 'vime.run': 'e2b-lifetime' } });
    expect(await leaked.isAlive()).toBe(true);
    await waitFor('E2B timeout to end the sandbox', async () => !(await leaked.isAlive()));
    expect([...standin.boxes.values()].some((b) => b.metadata['vime.run'] === 'e2b-lifetime')).toBe(false);
  });

  it('reaps a run by its metadata label, leaving live owners unless told, and other runs alone', async () => {
    const a1 = await provider.create({ workdir: '/w', labels: { 'vime.run': 'e2b-reap' } });
    const keep = await provider.create({ workdir: '/w', labels: { 'vime.run': 'e2b-other' } });
    // A sandbox of a crashed process (an owner pid that is not running) at the same run, made with the SDK.
    await E2bSandbox.create('base', {
      apiKey: standin.apiKey,
      apiUrl: standin.url,
      sandboxUrl: standin.url,
      metadata: {
        'vime.run': 'e2b-reap',
        'vime.sandbox': 'sbx-crashed',
        'vime.owner': `${hostname()}:2147483646:1`,
      },
    });
    const first = await provider.reapOrphans('e2b-reap');
    expect(first.removed.map((r) => r.id)).toEqual(['sbx-crashed']);
    expect(first.skippedLive).toBe(1);
    const second = await provider.reapOrphans({ run: 'e2b-reap', includeLive: true });
    expect(second.removed.map((r) => r.id)).toEqual([a1.id]);
    expect(await a1.isAlive()).toBe(false);
    expect(await keep.isAlive()).toBe(true);
    await keep.terminate();
    await a1.terminate();
    await expect(provider.reapOrphans({})).rejects.toThrow(/needs `run`/);
  });
});

describe('e2bProvider rate limit against the E2B stand-in (a token bucket answering 429 + Retry-After)', () => {
  it('surfaces a 429 as HostedRateLimitError with retryAfterMs, and a create after that wait succeeds', async () => {
    const standin = await startE2bStandin({ ratePerSecond: 2 });
    const provider = e2bProvider({ apiKey: standin.apiKey, apiUrl: standin.url, sandboxUrl: standin.url });
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 12 }, () =>
          provider.create({ workdir: '/w', labels: { 'vime.run': 'e2b-429' } }),
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
          vendor: 'e2b',
          operation: 'create',
          code: 'rate_limited',
          retryAfterMs: 1000,
        });
      }
      for (const r of results) if (r.status === 'fulfilled') await r.value.terminate();
      await new Promise((r) => setTimeout(r, (refused[0] as HostedRateLimitError).retryAfterMs));
      const after = await provider.create({ workdir: '/w', labels: { 'vime.run': 'e2b-429' } });
      await after.terminate();
    } finally {
      await standin.close();
    }
  });
});
