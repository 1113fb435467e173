/**
 * modalProvider against a STAND-IN for Modal's servers (src/standins/modal.ts): a loopback HTTP/2 gRPC
 * server speaking Modal's control plane and task command router with the messages of Modal's published
 * protos, that runs commands as local processes under a temp root per sandbox. The `modal` SDK itself is
 * unmodified; it is only pointed at the stand-in (`serverUrl`, dialled in plaintext because it is local).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { fleetProvider, type Sandbox, SandboxRateLimited } from '@vime/sandbox';
import { ModalClient } from 'modal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostedRateLimitError } from '../errors.js';
import { noProcessRunning, waitFor } from '../int-test-support.js';
import type { HostedProvider } from '../provider.js';
import { type ModalStandin, startModalStandin } from '../standins/modal.js';
import { type ModalProviderOptions, modalProvider } from './provider.js';

const connect = (standin: ModalStandin, more: Partial<ModalProviderOptions> = {}) =>
  modalProvider({
    tokenId: standin.tokenId,
    tokenSecret: standin.tokenSecret,
    serverUrl: standin.url,
    ...more,
  });

describe('modalProvider against the Modal stand-in (control plane + task command router, gRPC)', () => {
  let standin: ModalStandin;
  let provider: HostedProvider;
  let sbx: Sandbox;

  beforeAll(async () => {
    standin = await startModalStandin({ createsPerSecond: 1000 });
    provider = connect(standin, { app: 'vime-test' });
    sbx = await provider.create({
      workdir: '/testbed',
      image: 'python:3.12-slim',
      env: { GREETING: 'hello' },
      labels: { 'vime.run': 'modal-test' },
      lifetimeMs: 10 * 60_000,
    });
  });
  afterAll(async () => {
    await sbx?.terminate();
    await standin?.close();
  });

  it('creates in the app from the registry image, with the run label as Modal tags and the lifetime as its timeout', () => {
    expect(sbx.provider).toBe('modal');
    const boxes = [...standin.boxes.values()];
    expect(boxes).toHaveLength(1);
    const box = boxes[0]!;
    expect(box.imageTag).toBe('python:3.12-slim');
    expect(box.tags['vime.run']).toBe('modal-test');
    expect(box.tags['vime.sandbox']).toBe(sbx.id);
    expect(box.timeoutSecs).toBe(600);
    expect(existsSync(box.path('/testbed'))).toBe(true);
    expect(standin.calls.SandboxCreateV2).toBe(1);
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
    // No stdin given: the command reads end-of-file at once rather than waiting.
    expect((await sbx.exec('cat; echo done', { timeoutMs: 20_000 })).stdout).toBe('done\n');
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
    const box = [...standin.boxes.values()][0]!;
    await waitFor('the aborted command to be killed', () => noProcessRunning(box.id, ['sleep', '31']));
  });

  it('caps large output keeping head and tail', async () => {
    const r = await sbx.exec('seq 1 200000', { maxOutputBytes: 4096 });
    expect(r.truncated).toBe(true);
    expect(r.stdout.startsWith('1\n2\n3\n')).toBe(true);
    expect(r.stdout.endsWith('199999\n200000\n')).toBe(true);
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
    expect((await sbx.readFile('big.bin', { maxBytes: 5000 })).length).toBe(5000);
    await expect(sbx.readFile('big.bin', { maxBytes: 4999 })).rejects.toMatchObject({
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

  it('terminates: the sandbox ends at Modal, isAlive is false, terminate is idempotent', async () => {
    const other = await provider.create({ workdir: '/w', labels: { 'vime.run': 'modal-test' } });
    const vendorId = [...standin.boxes.values()].find((b) => b.tags['vime.sandbox'] === other.id)!.id;
    expect(await other.isAlive()).toBe(true);
    await Promise.all([other.terminate(), other.terminate()]);
    expect(standin.boxes.has(vendorId)).toBe(false);
    expect(await other.isAlive()).toBe(false);
    await expect(other.exec('true')).rejects.toMatchObject({ code: 'sandbox_terminated' });
  });

  it("sets Modal's own timeout, which ends a sandbox nobody terminates (the leak backstop)", async () => {
    // No spec.lifetimeMs: no timer in this process, only Modal's timeout (1 s).
    const short = connect(standin, { app: 'vime-test', defaultLifetimeMs: 1000, handleSignals: false });
    const leaked = await short.create({ workdir: '/w', labels: { 'vime.run': 'modal-lifetime' } });
    expect(await leaked.isAlive()).toBe(true);
    await waitFor("Modal's timeout to end the sandbox", async () => !(await leaked.isAlive()));
    expect([...standin.boxes.values()].some((b) => b.tags['vime.run'] === 'modal-lifetime')).toBe(false);
  });

  it('reaps a run by its tag in the app, leaving live owners unless told, and other runs alone', async () => {
    const a1 = await provider.create({ workdir: '/w', labels: { 'vime.run': 'modal-reap' } });
    const keep = await provider.create({ workdir: '/w', labels: { 'vime.run': 'modal-other' } });
    // A sandbox of a crashed process (an owner pid that is not running) at the same run, made with the SDK.
    process.env.MODAL_SERVER_URL = standin.url;
    const sdk = new ModalClient({ tokenId: standin.tokenId, tokenSecret: standin.tokenSecret });
    delete process.env.MODAL_SERVER_URL;
    const app = await sdk.apps.fromName('vime-test', { createIfMissing: true });
    const orphan = await sdk.sandboxes.create(app, sdk.images.fromRegistry('python:3.12-slim'), {
      tags: {
        'vime.run': 'modal-reap',
        'vime.sandbox': 'sbx-crashed',
        'vime.owner': `${hostname()}:2147483646:1`,
      },
    });
    const first = await provider.reapOrphans('modal-reap');
    expect(first.removed.map((r) => r.id)).toEqual(['sbx-crashed']);
    expect(await orphan.poll()).not.toBeNull();
    orphan.detach();
    expect(first.skippedLive).toBe(1);
    const second = await provider.reapOrphans({ run: 'modal-reap', includeLive: true });
    expect(second.removed.map((r) => r.id)).toEqual([a1.id]);
    expect(await a1.isAlive()).toBe(false);
    expect(await keep.isAlive()).toBe(true);
    await keep.terminate();
    await a1.terminate();
    await expect(provider.reapOrphans({})).rejects.toThrow(/needs `run`/);
  });
});

describe('modalProvider credentials against the Modal stand-in', () => {
  it('fails a create with wrong credentials as a SandboxError naming UNAUTHENTICATED, not as a rate limit', async () => {
    const standin = await startModalStandin();
    try {
      const wrong = modalProvider({ tokenId: 'ak-wrong', tokenSecret: 'as-wrong', serverUrl: standin.url });
      const error = await wrong.create({ workdir: '/w' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(SandboxError.isInstance(error), String(error)).toBe(true);
      expect(SandboxRateLimited.isInstance(error)).toBe(false);
      expect(String((error as Error).message)).toMatch(/UNAUTHENTICATED/);
      expect(standin.boxes.size).toBe(0);
    } finally {
      await standin.close();
    }
  });
});

describe('modalProvider rate limit against the Modal stand-in (RESOURCE_EXHAUSTED + RPCRetryPolicy)', () => {
  it("surfaces RESOURCE_EXHAUSTED as HostedRateLimitError carrying Modal's retry_after_secs", async () => {
    const standin = await startModalStandin({ createsPerSecond: 1, retryAfterSeconds: 2 });
    const provider = connect(standin);
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 6 }, () =>
          provider.create({ workdir: '/w', labels: { 'vime.run': 'modal-429' } }),
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
          vendor: 'modal',
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

  it("a fleet over Modal is refused, honours Modal's retry-after, and every rollout completes", async () => {
    // Modal (the stand-in) allows 1 creation a second; the fleet is told 20 with bursts of 4 and sends 4
    // creates at once, so Modal refuses some of them whatever this machine's speed.
    const standin = await startModalStandin({ createsPerSecond: 1, retryAfterSeconds: 2 });
    const fleet = fleetProvider({
      backends: [{ name: 'modal', provider: connect(standin), capacity: 50, createsPerSecond: 20, burst: 4 }],
      lifetimeMs: 10 * 60_000,
      maxStarting: 8,
    });
    const warnings: Array<{ code?: string | undefined; data?: unknown }> = [];
    fleet.events.on('warning', (w) => warnings.push(w));
    try {
      const rollouts = await Promise.allSettled(
        Array.from({ length: 5 }, async (_, i) => {
          const s = await fleet.create({ workdir: '/w', labels: { 'vime.run': 'modal-fleet' } });
          try {
            return (await s.exec(`echo rollout ${i}`)).stdout;
          } finally {
            await s.terminate();
          }
        }),
      );
      expect(rollouts.map((r) => (r.status === 'fulfilled' ? r.value : String(r.reason)))).toEqual(
        Array.from({ length: 5 }, (_, i) => `rollout ${i}\n`),
      );
      expect(standin.rateLimited).toBeGreaterThan(0);
      // Every refusal reached the fleet as a rate limit with Modal's retry-after, none as a failure.
      expect(fleet.stats()[0]).toMatchObject({ created: 5, failed: 0, rateLimited: standin.rateLimited });
      const limited = warnings.filter((w) => w.code === 'rate_limited');
      expect(limited).toHaveLength(standin.rateLimited);
      for (const w of limited) expect(w.data).toMatchObject({ backend: 'modal', retryAfterMs: 2000 });
      expect(standin.createLog.filter((e) => !e.refused)).toHaveLength(5);
    } finally {
      await fleet.close();
      await standin.close();
    }
  });
});
