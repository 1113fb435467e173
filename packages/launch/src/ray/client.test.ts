import { ValidationError } from '@vime/core';
import { closedPort } from '@vime/core/standin';
import { afterEach, describe, expect, it } from 'vitest';
import { type FakeRay, type FakeRayOptions, startFakeRay } from '../testing/ray.js';
import { RayJobFailedError, RayJobsClient, RayJobsError } from './client.js';

const servers: FakeRay[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
async function ray(options: FakeRayOptions = {}) {
  const s = await startFakeRay(options);
  servers.push(s);
  return s;
}
const caught = async (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe('RayJobsClient', () => {
  it('submits where a fetch() would be refused as browser traffic', async () => {
    const server = await ray();
    // Node's global fetch sends sec-fetch-mode: cors; the dashboard answers 405.
    const viaFetch = await fetch(`${server.url}/api/jobs/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ entrypoint: 'echo hi' }),
    });
    expect(viaFetch.status).toBe(405);
    expect(await viaFetch.text()).toBe('Method Not Allowed for browser traffic.');

    const client = new RayJobsClient({ address: server.url });
    expect((await client.version()).version).toBe('4.0.0');
    const { submissionId, existing } = await client.submit({ entrypoint: 'echo hi' });
    expect(existing).toBe(false);
    expect(submissionId).toMatch(/^vime_[0-9a-f]{16}$/);
    const post = server.requests.filter((r) => r.method === 'POST').at(-1)!;
    expect(post.path).toBe('/api/jobs/');
    expect(Object.keys(post.headers).filter((h) => h.startsWith('sec-fetch') || h === 'origin')).toEqual([]);
  });

  it('sends the token as a Bearer header and explains 401 and 403', async () => {
    const server = await ray({ token: 's3cret' });
    const missing = (await caught(new RayJobsClient({ address: server.url }).list())) as RayJobsError;
    expect(missing).toBeInstanceOf(RayJobsError);
    expect(missing.status).toBe(401);
    expect(missing.message).toMatch(/HTTP 401: Unauthorized: Missing authentication token.*RAY_AUTH_TOKEN/);
    expect(missing.isRetryable).toBe(false);
    const wrong = (await caught(
      new RayJobsClient({ address: server.url, token: 'nope' }).list(),
    )) as RayJobsError;
    expect(wrong.status).toBe(403);
    expect(wrong.message).toMatch(/Forbidden: Invalid authentication token.*ray get-auth-token/);
    // A refused submission is not retried.
    const refused = (await caught(
      new RayJobsClient({ address: server.url, token: 'nope', submitRetryDelayMs: 1 }).submit({
        entrypoint: 'x',
      }),
    )) as RayJobsError;
    expect(refused.status).toBe(403);
    expect(server.created).toEqual([]);

    const client = new RayJobsClient({ address: server.url, token: 's3cret' });
    expect(await client.list()).toHaveLength(1);
    expect(server.requests.at(-1)!.headers.authorization).toBe('Bearer s3cret');
  });

  it('retries "No available agent" until the agent registers, and starts exactly one job', async () => {
    const server = await ray({ agentMissingFor: 2 });
    const client = new RayJobsClient({ address: server.url, submitRetryDelayMs: 10 });
    const retries: string[] = [];
    client.on('retry', (r) => retries.push(`${r.attempt}:${r.reason}`));
    const result = await client.submit({ entrypoint: 'python3 train.py', submission_id: 'run-1' });
    expect(result).toEqual({ submissionId: 'run-1', existing: false });
    expect(retries).toEqual(['1:HTTP 500: no available agent', '2:HTTP 500: no available agent']);
    expect(server.created).toEqual(['run-1']);

    const stubborn = await ray({ agentMissingFor: 10 });
    const error = (await caught(
      new RayJobsClient({ address: stubborn.url, submitAttempts: 3, submitRetryDelayMs: 1 }).submit({
        entrypoint: 'x',
      }),
    )) as RayJobsError;
    expect(error.status).toBe(500);
    expect(error.isRetryable).toBe(true);
    expect(error.message).toContain('No available agent to submit job, please try again later.');
    expect(stubborn.requests.filter((r) => r.method === 'POST')).toHaveLength(3);
  });

  it('retries a refused connection until the dashboard is up', async () => {
    const address = await closedPort();
    const client = new RayJobsClient({ address, submitRetryDelayMs: 100, submitAttempts: 20 });
    const retries: string[] = [];
    client.on('retry', (r) => retries.push(r.reason));
    setTimeout(() => void ray({ port: Number(new URL(address).port) }), 250);
    const result = await client.submit({ entrypoint: 'echo', submission_id: 'late' });
    expect(result.existing).toBe(false);
    expect(retries.length).toBeGreaterThan(0);
    expect(retries[0]).toBe('ECONNREFUSED');
    expect(servers[0]!.created).toEqual(['late']);
  });

  for (const duplicateStatus of [400, 500] as const) {
    it(`treats a duplicate submission_id (HTTP ${duplicateStatus}) as the same job, never a second run`, async () => {
      const server = await ray({ duplicateStatus });
      const client = new RayJobsClient({ address: server.url });
      await client.submit({ entrypoint: 'python3 train.py', submission_id: 'once' });
      expect(await client.submit({ entrypoint: 'python3 train.py', submission_id: 'once' })).toEqual({
        submissionId: 'once',
        existing: true,
      });
      expect(server.created).toEqual(['once']);
      const clash = (await caught(
        client.submit({ entrypoint: 'python3 other.py', submission_id: 'once' }),
      )) as Error;
      expect(clash).toBeInstanceOf(RayJobsError);
      expect(clash.message).toMatch(
        /submission_id once is already used by a different job.*choose another id/,
      );
    });
  }

  it('waits for a failed job, surfaces its log tail, and never re-runs it', async () => {
    const lines = Array.from({ length: 80 }, (_, i) => `step ${i}`);
    const server = await ray({
      script: {
        lines: [...lines, 'RuntimeError: NCCL error'],
        lineIntervalMs: 1,
        outcome: 'FAILED',
        exitCode: 3,
      },
    });
    const client = new RayJobsClient({ address: server.url });
    const { submissionId } = await client.submit({
      entrypoint: 'python3 train_async.py',
      submission_id: 'crash',
    });
    const statuses: string[] = [];
    client.on('status', (j) => statuses.push(j.status));
    const error = (await caught(
      client.wait(submissionId, { intervalMs: 20, tailLines: 3 }),
    )) as RayJobFailedError;
    expect(error).toBeInstanceOf(RayJobFailedError);
    expect(error.job.status).toBe('FAILED');
    expect(error.job.driver_exit_code).toBe(3);
    expect(error.logTail).toBe('step 78\nstep 79\nRuntimeError: NCCL error');
    expect(error.message).toMatch(
      /^Ray job crash ended FAILED: Job entrypoint command failed with exit code 3/,
    );
    expect(error.message).toContain('RuntimeError: NCCL error');
    expect(statuses.at(-1)).toBe('FAILED');
    // Submitting the same run again does not start it again.
    expect(
      (await client.submit({ entrypoint: 'python3 train_async.py', submission_id: 'crash' })).existing,
    ).toBe(true);
    expect(server.created).toEqual(['crash']);
  });

  it('gets, lists (an array, submissions first), tails, stops and deletes', async () => {
    // Lines 200 ms apart: the tail sees them in one chunk only if this process stalls for 600 ms.
    const server = await ray({
      script: { pendingMs: 400, lines: ['a', 'b', 'c', 'd'], lineIntervalMs: 200 },
    });
    const client = new RayJobsClient({ address: server.url });
    await client.submit({
      entrypoint: 'python3 train.py',
      submission_id: 'ok',
      runtime_env: { env_vars: { CUDA_DEVICE_MAX_CONNECTIONS: '1' } },
      metadata: { run: 'ok' },
    });
    expect((await client.get('ok')).status).toBe('PENDING');
    const list = await client.list();
    expect(list.map((j) => j.type)).toEqual(['SUBMISSION', 'DRIVER']);
    expect(list[0]!.runtime_env).toEqual({ env_vars: { CUDA_DEVICE_MAX_CONNECTIONS: '1' } });

    const chunks: string[] = [];
    for await (const chunk of client.tail('ok', { intervalMs: 10 })) chunks.push(chunk);
    expect(chunks.join('')).toBe('a\nb\nc\nd\n');
    expect(chunks.length).toBeGreaterThan(1);
    expect((await client.wait('ok')).status).toBe('SUCCEEDED');
    expect(await client.stop('ok')).toBe(false);
    expect(await client.delete('ok')).toBe(true);

    const missing = (await caught(client.get('ok'))) as RayJobsError;
    expect(missing.status).toBe(404);
    expect(missing.message).toContain('Job ok does not exist');
    const driverLogs = (await caught(client.logs('01000000'))) as RayJobsError;
    expect(driverLogs.status).toBe(400);
    expect(driverLogs.message).toContain('Can only get logs of submission type jobs');

    await client.submit({ entrypoint: 'sleep 100', submission_id: 'long' });
    const running = (await caught(client.delete('long'))) as RayJobsError;
    expect(running.status).toBe(500);
    expect(running.message).toContain('non-terminal state');
    expect(await client.stop('long')).toBe(true);
    await expect(client.wait('long', { intervalMs: 10 })).rejects.toMatchObject({
      job: { status: 'STOPPED' },
    });
  });

  it('refuses a malformed submission before sending it', async () => {
    const server = await ray();
    const client = new RayJobsClient({ address: server.url });
    const error = await caught(
      client.submit({ entrypoint: 'x', runtime_env: {}, entrypoint_gpus: 1 } as never),
    );
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as Error).message).toContain('entrypoint_gpus');
    expect(server.requests).toEqual([]);
  });
});
