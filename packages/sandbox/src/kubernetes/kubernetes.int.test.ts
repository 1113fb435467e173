/**
 * The Kubernetes provider against a STAND-IN API server (no real one runs here; see
 * __fixtures__/kube-apiserver.ts and __fixtures__/kube-agent-sandbox.ts): a real HTTP and WebSocket
 * server on loopback that follows the API's conventions and agent-sandbox's CRD schemas, so every request
 * here is the official client's own. The stand-in runs each exec'd command as a real process.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StandinApiServer, startStandinApiServer } from '../__fixtures__/kube-apiserver.js';
import type { KubeObject } from '../__fixtures__/kube-objects.js';
import { SandboxRateLimited } from '../errors.js';
import { reapOrphans } from '../reap.js';
import { KubernetesRateLimitError } from './client.js';
import { kubernetesProvider } from './provider.js';
import type { KubernetesSandbox } from './sandbox.js';

const NS = 'vime-test';
const IMAGE = 'python:3.12-slim';
let api: StandinApiServer;
const rootDir = mkdtempSync(join(tmpdir(), 'vime-kube-reap-'));

beforeAll(async () => {
  api = await startStandinApiServer();
});
afterAll(async () => {
  await api.close();
  rmSync(rootDir, { recursive: true, force: true });
});

/** Poll `check` until it returns a value, for at most `budgetMs`; the failure says what was awaited and seen. */
async function until<T>(what: string, check: () => T | undefined | false, budgetMs = 20_000): Promise<T> {
  const deadline = Date.now() + budgetMs;
  let last: unknown;
  while (Date.now() < deadline) {
    const value = check();
    if (value) return value;
    last = value;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`waited ${budgetMs} ms for ${what}; last saw ${JSON.stringify(last)}`);
}

const podOf = (sbx: KubernetesSandbox): KubeObject | undefined => api.pods.get(`${NS}/${sbx.pod}`)?.object;

describe('kubernetes provider (stand-in API server): plain pods', () => {
  it('creates a pod with the image, resources, run labels and activeDeadlineSeconds, and waits until it runs', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS), activeDeadlineSeconds: 3600 });
    const sbx = (await provider.create({
      image: IMAGE,
      workdir: '/testbed',
      env: { GREETING: 'hi' },
      limits: { memoryBytes: 1 << 30, cpus: 1.5, tmpBytes: 64 << 20 },
      labels: { 'vime.run': 'k8s-create' },
    })) as KubernetesSandbox;
    try {
      const pod = podOf(sbx)!;
      expect(pod.status.phase).toBe('Running');
      expect(pod.metadata.labels).toMatchObject({ 'vime.run': 'k8s-create', 'vime.sandbox': sbx.id });
      // The owner label is not a valid label value: it travels as an annotation.
      expect(pod.metadata.annotations['vime.owner']).toBe(sbx.labels['vime.owner']);
      expect(pod.spec.activeDeadlineSeconds).toBe(3600);
      expect(pod.spec.automountServiceAccountToken).toBe(false);
      const [container] = pod.spec.containers;
      expect(container).toMatchObject({ image: IMAGE, workingDir: '/testbed' });
      expect(container.resources.limits).toEqual({ memory: String(1 << 30), cpu: '1500m' });
      expect(pod.spec.volumes).toEqual([
        { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: String(64 << 20) } },
      ]);
      expect((await sbx.exec('echo $GREETING; pwd')).stdout).toBe('hi\n/testbed\n');
      expect(await sbx.isAlive()).toBe(true);
    } finally {
      await sbx.terminate();
    }
  });

  it('refuses a spec it cannot honour, naming the field and the fix, before anything is created', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS) });
    const before = api.requests.length;
    await expect(provider.create({ workdir: '/w' })).rejects.toThrow(/needs an image: set spec\.image/);
    await expect(
      provider.create({ image: IMAGE, workdir: '/w', labels: { 'vime.run': 'has spaces' } }),
    ).rejects.toThrow(/spec\.labels\["vime\.run"\] = "has spaces" is not a valid Kubernetes label value/);
    await expect(
      provider.create({ image: IMAGE, workdir: '/w', proxy: { socketPath: '/x.sock' } }),
    ).rejects.toThrow(/supports neither spec\.proxy/);
    expect(api.requests.length).toBe(before);
  });

  it('fails a create whose image cannot be pulled at once, with the kubelet reason, and deletes its pod', async () => {
    api.unpullable.add('registry.invalid/missing:1');
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS), startTimeoutMs: 600_000 });
    const pods = api.pods.size;
    await expect(
      provider.create({ image: 'registry.invalid/missing:1', workdir: '/w' }),
    ).rejects.toMatchObject({
      code: 'pod_failed',
      message: expect.stringMatching(/ErrImagePull: failed to pull image .*pull secrets/),
    });
    expect(api.pods.size).toBe(pods);
  });

  it('names the kubeconfig that cannot be loaded, and the fix', () => {
    expect(() => kubernetesProvider({ kubeconfig: '/nonexistent/kubeconfig' })).toThrow(
      /cannot load the kubeconfig "\/nonexistent\/kubeconfig".*pass \{ kubeconfig: PATH \}, set KUBECONFIG/,
    );
  });

  it('times an exec out in the pod and kills its whole tree, detached children included', async () => {
    const sbx = await kubernetesProvider({ kubeConfig: api.kubeConfig(NS) }).create({
      image: IMAGE,
      workdir: '/w',
    });
    try {
      const timeoutMs = 1000;
      // The child records its pid and its start time: pids are reused (pid_max may be 32768, and the
      // machine runs other tests), so "gone" means no process with that pid started when the child did.
      const child = "echo \\$\\$ \\$(cut -d' ' -f22 /proc/\\$\\$/stat) > /tmp/child.pid; exec sleep 300";
      const r = await sbx.exec(`setsid sh -c "${child}" & sleep 300`, { timeoutMs });
      expect(r).toMatchObject({ timedOut: true, exitCode: null });
      expect(r.durationMs).toBeGreaterThanOrEqual(timeoutMs);
      const [pid, start] = (await sbx.readTextFile('/tmp/child.pid')).trim().split(' ');
      expect(pid).toMatch(/^\d+$/);
      expect(start).toMatch(/^\d+$/);
      // The detached child left the exec's process group; the exec marker found it.
      const alive = await sbx.exec(
        `set -- $(cut -d' ' -f3,22 /proc/${pid}/stat 2>/dev/null); [ "$2" = ${start} ] && [ "$1" != Z ] && echo alive || echo gone`,
      );
      expect(alive.stdout).toBe('gone\n');
      expect((await sbx.exec('echo still-usable')).stdout).toBe('still-usable\n');
    } finally {
      await sbx.terminate();
    }
  });

  it('moves files both ways as tar over exec, refusing a read over the cap before reading it', async () => {
    const sbx = await kubernetesProvider({ kubeConfig: api.kubeConfig(NS) }).create({
      image: IMAGE,
      workdir: '/w',
    });
    try {
      const bytes = new Uint8Array(300_000).map((_, i) => (i * 7) % 256);
      await sbx.writeFile('deep/er/blob.bin', bytes, { mode: 0o600 });
      expect(Buffer.from(await sbx.readFile('/w/deep/er/blob.bin')).equals(Buffer.from(bytes))).toBe(true);
      expect((await sbx.exec('stat -c %a deep/er/blob.bin')).stdout).toBe('600\n');
      await sbx.exec('printf made-inside > out.txt && ln -s out.txt link.txt');
      expect(await sbx.readTextFile('link.txt')).toBe('made-inside');
      const host = mkdtempSync(join(tmpdir(), 'vime-kube-copyin-'));
      mkdirSync(join(host, 'pkg'));
      writeFileSync(join(host, 'pkg', 'mod.py'), 'VALUE = 42\n');
      await sbx.copyIn(host, 'repo');
      rmSync(host, { recursive: true, force: true });
      const r = await sbx.exec(['python3', '-c', 'import pkg.mod; print(pkg.mod.VALUE)'], { cwd: 'repo' });
      expect(r.stdout).toBe('42\n');
      await expect(sbx.readFile('deep/er/blob.bin', { maxBytes: 1000 })).rejects.toMatchObject({
        code: 'file_too_large',
        data: { size: 300_000 },
      });
      await expect(sbx.readFile('/dev/zero')).rejects.toMatchObject({ code: 'invalid_argument' });
      await expect(sbx.readFile('nope.txt')).rejects.toMatchObject({ code: 'not_found' });
      // Every transfer went through the exec subresource: no other endpoint of the pod was used.
      const paths = new Set(
        api.requests.filter((q) => q.path.includes(sbx.id)).map((q) => q.path.split('/').at(-1)),
      );
      expect([...paths].sort()).toEqual(['exec', `vime-${sbx.id}`]);
    } finally {
      await sbx.terminate();
    }
  });

  it('terminates by deleting the pod, once, and the sandbox refuses work after', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS) });
    const terminated: string[] = [];
    provider.events.on('terminate', (e) => terminated.push(e.id));
    const sbx = (await provider.create({ image: IMAGE, workdir: '/w' })) as KubernetesSandbox;
    await sbx.exec('nohup sleep 300 > /dev/null 2>&1 &');
    await Promise.all([sbx.terminate(), sbx.terminate()]);
    expect(api.pods.has(`${NS}/${sbx.pod}`)).toBe(false);
    expect(api.requests.filter((q) => q.method === 'DELETE' && q.path.endsWith(sbx.pod))).toHaveLength(1);
    expect(terminated).toEqual([sbx.id]);
    expect(await sbx.isAlive()).toBe(false);
    await expect(sbx.exec('true')).rejects.toMatchObject({ code: 'sandbox_terminated' });
  });

  it('sets the lifetime as activeDeadlineSeconds, which the server enforces even when this process does not', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS), handleSignals: false });
    const sbx = (await provider.create({
      image: IMAGE,
      workdir: '/w',
      lifetimeMs: 60_500,
    })) as KubernetesSandbox;
    expect(podOf(sbx)?.spec.activeDeadlineSeconds).toBe(61);
    await sbx.terminate();
    // A pod whose creator is gone (no client-side timer): the server's deadline alone ends it.
    const deadline = 1;
    const orphan = (await kubernetesProvider({
      kubeConfig: api.kubeConfig(NS),
      activeDeadlineSeconds: deadline,
      handleSignals: false,
    }).create({ image: IMAGE, workdir: '/w' })) as KubernetesSandbox;
    try {
      expect(podOf(orphan)?.spec.activeDeadlineSeconds).toBe(deadline);
      const status = await until(
        'the pod to fail with DeadlineExceeded',
        () => podOf(orphan)?.status.phase === 'Failed' && podOf(orphan)?.status,
        20 * deadline * 1000,
      );
      expect(status.reason).toBe('DeadlineExceeded');
      expect(await orphan.isAlive()).toBe(false);
      await expect(orphan.exec('true')).rejects.toSatisfy((e) => SandboxError.isInstance(e));
    } finally {
      await orphan.terminate();
    }
  });

  it('surfaces a 429 with Retry-After as a KubernetesRateLimitError carrying the wait, and leaves nothing', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS) });
    const pods = api.pods.size;
    api.throttle = { count: 1, retryAfterSeconds: 7, match: (m, p) => m === 'POST' && p.endsWith('/pods') };
    const error = await provider.create({ image: IMAGE, workdir: '/w' }).catch((e: unknown) => e);
    expect(KubernetesRateLimitError.isInstance(error)).toBe(true);
    // the one rate-limit error a fleet honours
    expect(SandboxRateLimited.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ code: 'rate_limited', retryAfterMs: 7000 });
    expect(SandboxError.isInstance(error)).toBe(true);
    expect(api.pods.size).toBe(pods);
    const sbx = await provider.create({ image: IMAGE, workdir: '/w' });
    await sbx.terminate();
  });

  it('types a 429 on the exec handshake as a KubernetesRateLimitError too (without its wait: the client does not hand on the handshake headers)', async () => {
    const sbx = await kubernetesProvider({ kubeConfig: api.kubeConfig(NS) }).create({
      image: IMAGE,
      workdir: '/w',
    });
    try {
      api.throttle = { count: 1, retryAfterSeconds: 3, match: (_m, p) => p.endsWith('/exec') };
      const error = await sbx.exec('true').catch((e: unknown) => e);
      expect(KubernetesRateLimitError.isInstance(error)).toBe(true);
      expect(error).toMatchObject({ code: 'rate_limited', retryAfterMs: undefined });
      expect((await sbx.exec('echo after')).stdout).toBe('after\n');
    } finally {
      await sbx.terminate();
    }
  });

  it('reaps the pods of a run by label, leaving other runs alone', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS), handleSignals: false });
    const mine = (await provider.create({
      image: IMAGE,
      workdir: '/w',
      labels: { 'vime.run': 'k8s-reap' },
    })) as KubernetesSandbox;
    const other = (await provider.create({
      image: IMAGE,
      workdir: '/w',
      labels: { 'vime.run': 'k8s-keep' },
    })) as KubernetesSandbox;
    try {
      const kubernetes = { kubeConfig: api.kubeConfig(NS) };
      const live = await reapOrphans({ run: 'k8s-reap', kubernetes, docker: false, rootDir });
      expect(live).toMatchObject({ removed: [], skippedLive: 1, errors: [] });
      const report = await reapOrphans({
        run: 'k8s-reap',
        kubernetes,
        docker: false,
        rootDir,
        includeLive: true,
      });
      expect(report.errors).toEqual([]);
      expect(report.removed).toEqual([expect.objectContaining({ id: mine.id, provider: 'kubernetes' })]);
      expect(api.pods.has(`${NS}/${mine.pod}`)).toBe(false);
      expect(api.pods.has(`${NS}/${other.pod}`)).toBe(true);
    } finally {
      await Promise.all([mine.terminate(), other.terminate()]);
    }
  });
});

describe('kubernetes provider (stand-in API server): agent-sandbox claims', () => {
  it('claims a warm sandbox from the pool of its image, and releasing deletes the claim, its sandbox and its pod', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS), agentSandbox: { replicas: 1 } });
    const claims: Array<{ id: string; pool: string; warm: boolean }> = [];
    provider.events.on('claim', (e) => claims.push(e));
    const spec = { image: IMAGE, workdir: '/w', labels: { 'vime.run': 'k8s-claim' } };
    const first = (await provider.create(spec)) as KubernetesSandbox;
    const pool = claims[0]!.pool;
    const poolKey = `extensions.agents.x-k8s.io/v1beta1/sandboxwarmpools/${NS}/${pool}`;
    expect(api.custom.get(poolKey)?.spec).toEqual({ replicas: 1, sandboxTemplateRef: { name: pool } });
    const template = api.custom.get(`extensions.agents.x-k8s.io/v1beta1/sandboxtemplates/${NS}/${pool}`);
    expect(template?.spec.podTemplate.spec.containers[0].image).toBe(IMAGE);
    await until(
      'a warm sandbox ready in the pool',
      () => api.custom.get(poolKey)?.status?.readyReplicas === 1,
    );
    const second = (await provider.create({ ...spec, lifetimeMs: 600_000 })) as KubernetesSandbox;
    try {
      expect(claims.map((c) => c.pool)).toEqual([pool, pool]);
      expect(claims[1]).toMatchObject({ id: second.id, warm: true });
      const claim = api.custom.get(
        `extensions.agents.x-k8s.io/v1beta1/sandboxclaims/${NS}/vime-${second.id}`,
      )!;
      expect(claim.spec.warmPoolRef).toEqual({ name: pool });
      expect(Date.parse(claim.spec.lifecycle.shutdownTime)).toBeGreaterThan(Date.now());
      expect(claim.spec.lifecycle.shutdownPolicy).toBe('Delete');
      // The claim's labels reached the adopted pod, so the reaper finds it by run.
      expect(podOf(second)?.metadata.labels).toMatchObject({
        'vime.run': 'k8s-claim',
        'vime.sandbox': second.id,
      });
      expect((await second.exec('echo from the claimed pod; exit 4')).exitCode).toBe(4);
      await second.writeFile('x.txt', 'claimed');
      expect(await second.readTextFile('x.txt')).toBe('claimed');
    } finally {
      await Promise.all([first.terminate(), second.terminate()]);
    }
    expect(api.custom.has(`extensions.agents.x-k8s.io/v1beta1/sandboxclaims/${NS}/vime-${second.id}`)).toBe(
      false,
    );
    expect(api.pods.has(`${NS}/${second.pod}`)).toBe(false);
    expect(api.pods.has(`${NS}/${first.pod}`)).toBe(false);
    // The pool refills itself after its warm sandbox was adopted.
    await until('the pool to refill', () => api.custom.get(poolKey)?.status?.readyReplicas === 1);
  });

  it('reaps the claims of a run (their pods go with them)', async () => {
    const provider = kubernetesProvider({
      kubeConfig: api.kubeConfig(NS),
      agentSandbox: true,
      handleSignals: false,
    });
    const sbx = (await provider.create({
      image: IMAGE,
      workdir: '/w',
      labels: { 'vime.run': 'k8s-reap-claim' },
    })) as KubernetesSandbox;
    try {
      const report = await reapOrphans({
        run: 'k8s-reap-claim',
        kubernetes: { kubeConfig: api.kubeConfig(NS) },
        docker: false,
        rootDir,
        includeLive: true,
      });
      expect(report.removed).toEqual([
        expect.objectContaining({ id: sbx.id, reason: expect.stringContaining('claim') }),
      ]);
      expect(api.pods.has(`${NS}/${sbx.pod}`)).toBe(false);
    } finally {
      await sbx.terminate();
    }
  });

  it('surfaces a 429 on the claim with its Retry-After, and leaves no claim behind', async () => {
    const provider = kubernetesProvider({ kubeConfig: api.kubeConfig(NS), agentSandbox: true });
    api.throttle = {
      count: 1,
      retryAfterSeconds: 2,
      match: (m, p) => m === 'POST' && p.endsWith('/sandboxclaims'),
    };
    const claimsBefore = [...api.custom.keys()].filter((k) => k.includes('/sandboxclaims/')).length;
    await expect(provider.create({ image: IMAGE, workdir: '/w' })).rejects.toMatchObject({
      code: 'rate_limited',
      retryAfterMs: 2000,
    });
    expect([...api.custom.keys()].filter((k) => k.includes('/sandboxclaims/')).length).toBe(claimsBefore);
  });
});
