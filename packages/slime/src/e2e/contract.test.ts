import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createSample } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RolloutServer, startRolloutServer } from '../rollout-server.js';

const run = promisify(execFile);
const pythonDir = fileURLToPath(new URL('../../python/', import.meta.url));
const testDir = fileURLToPath(new URL('../__fixtures__/', import.meta.url));
// Debian's interpreter, where python3-msgpack is installed.
const PYTHON = '/usr/bin/python3';

let server: RolloutServer;
const seen: Array<{ prompt: unknown; params: Record<string, unknown> }> = [];
let slowAborted = false;

beforeAll(async () => {
  server = await startRolloutServer({
    concurrency: 3,
    deadlineMs: 10_000,
    retryDelayMs: 10,
    rollout: async ({ sample, samplingParams, signal }) => {
      seen.push({ prompt: sample.prompt, params: samplingParams });
      if (sample.prompt === 'fail') throw new Error('sandbox pool exhausted');
      if (sample.prompt === 'slow') {
        await new Promise((resolve, reject) => {
          const t = setTimeout(resolve, 20_000);
          signal.addEventListener('abort', () => {
            clearTimeout(t);
            slowAborted = true;
            reject(signal.reason);
          });
        });
      }
      await new Promise((r) => setTimeout(r, 20));
      const row = (part: number) =>
        createSample({
          ...sample,
          rollout_id: sample.index,
          session_id: `sess-${sample.index}`,
          tokens: [100, 101, 102, 200 + part, 201, 202],
          response_length: 3,
          response: 'abc',
          loss_mask: [1, 0, 1],
          rollout_log_probs: [-0.5, 0, -0.25],
          reward: sample.index! % 2,
          status: 'completed',
          metadata: { ...sample.metadata, rollout_reward: sample.index! % 2 },
          extra: { vime_note: 'kept' },
        });
      return sample.prompt === 'fork-me' ? [row(0), row(1)] : [row(0)];
    },
  });
});
afterAll(() => server.close());

describe('slime bridge contract (Python side for real)', () => {
  it('round-trips slime samples through vime_bridge.generate', async () => {
    const { stdout } = await run(PYTHON, [`${testDir}contract_driver.py`], {
      env: {
        ...process.env,
        PYTHONPATH: pythonDir,
        VIME_ROLLOUT_URL: server.url,
        VIME_SAMPLE_CLASS: 'stand_in_sample:Sample',
      },
      timeout: 60_000,
    });
    const out = JSON.parse(stdout) as {
      results: Array<Array<Record<string, unknown>>>;
      failure: string | null;
      cancelled: boolean;
    };
    expect(out.results).toHaveLength(9);
    for (const [i, rows] of out.results.slice(0, 8).entries()) {
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        cls: 'Sample',
        status: 'completed',
        group_index: Math.floor(i / 4),
        index: i,
        rollout_id: i,
        tokens: [100, 101, 102, 200, 201, 202],
        response_length: 3,
        loss_mask: [1, 0, 1],
        rollout_log_probs: [-0.5, 0, -0.25],
        reward: i % 2,
        metadata: { instance_id: `task-${i}`, rollout_reward: i % 2 },
        session_id: `sess-${i}`,
        extra_attr: 'kept',
      });
    }
    // A forked rollout comes back as a list of rows sharing rollout_id and session_id.
    const fork = out.results[8]!;
    expect(fork.map((r) => r.tokens)).toEqual([
      [100, 101, 102, 200, 201, 202],
      [100, 101, 102, 201, 201, 202],
    ]);
    expect(new Set(fork.map((r) => r.rollout_id)).size).toBe(1);
    expect(seen.find((s) => s.prompt === 'task-0')?.params).toEqual({
      temperature: 1.0,
      top_p: 0.95,
      max_new_tokens: 64,
    });
    // An infrastructure failure (after the server's retries) is refused by a slime run with no filter to drop it.
    expect(out.failure).toMatch(
      /sample 99 failed for infrastructure reasons \(rollout_error: sandbox pool exhausted\)/,
    );
    expect(seen.filter((s) => s.prompt === 'fail')).toHaveLength(3);
    expect(out.cancelled).toBe(true);
    expect(slowAborted).toBe(true);
    expect(server.stats()).toMatchObject({ inFlight: 0, waiting: 0, aborted: 1, failed: 1 });
  });

  it('answers health, rejects bad bodies with a named error, and caps concurrency', async () => {
    const health = await fetch(`${server.url}/health`).then((r) => r.json());
    expect(health).toMatchObject({ status: 'ok', capacity: 3 });
    const bad = await fetch(`${server.url}/rollout`, { method: 'POST', body: new Uint8Array([0x91, 0x01]) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { message: expect.stringMatching(/sample/) } });
  });
});
