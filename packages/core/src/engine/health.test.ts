import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, EngineError } from '../errors.js';
import { closedPort, type HealthStandIn, startHealthStandIn } from '../standin/health.js';
import { type EngineHealthStatus, waitForEngines } from './health.js';

const engines: HealthStandIn[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
});
async function engine(...args: Parameters<typeof startHealthStandIn>) {
  const e = await startHealthStandIn(...args);
  engines.push(e);
  return e;
}
const fast = { initialDelayMs: 20, maxDelayMs: 100 };

describe('waitForEngines', () => {
  it('waits through a slow start on several engines and reports when each came up', async () => {
    // Far apart, so which came up first does not depend on how the machine schedules the two pollers.
    const aStarted = performance.now();
    const a = await engine({ script: { type: 'slow-start', readyAfterMs: 1500 } });
    const b = await engine({ kind: 'vllm', script: { type: 'slow-start', readyAfterMs: 100 } });
    const seen: string[] = [];
    // a's 1.5 s run from its own start, some of which a loaded machine spends starting b
    const aHeadStart = performance.now() - aStarted;
    const statuses = await waitForEngines([a.url, { url: b.url, kind: 'vllm' }], {
      deadline: 5_000,
      ...fast,
      onState: (s) => seen.push(`${s.url === a.url ? 'a' : 'b'}:${s.state}`),
    });
    expect(statuses.map((s) => s.state)).toEqual(['healthy', 'healthy']);
    expect(statuses[0]!.healthUrl).toBe(`${a.url}/health_generate`);
    expect(statuses[1]!.healthUrl).toBe(`${b.url}/health`);
    expect(statuses[0]!.firstError).toBe('HTTP 503');
    expect(statuses[0]!.healthyAfterMs).toBeGreaterThanOrEqual(1500 - aHeadStart);
    expect(statuses[1]!.healthyAfterMs).toBeLessThan(statuses[0]!.healthyAfterMs!);
    expect(seen).toContain('a:starting');
    expect(seen).toContain('a:healthy');
    expect(a.hits.get('/health_generate')).toBeGreaterThan(2);
    expect(b.hits.get('/health')).toBeGreaterThan(1);
  });

  it('does not pass a flapping engine, and names it with its state after the deadline', async () => {
    const good = await engine({ script: { type: 'healthy' } });
    const flappy = await engine({ script: { type: 'flapping' } });
    const error = await waitForEngines([good.url, flappy.url], { deadline: 600, ...fast }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(EngineError);
    const message = (error as EngineError).message;
    expect(message).toMatch(/^1 of 2 engine\(s\) never became healthy within 1s/);
    expect(message).toContain(`${flappy.url} (flapping`);
    expect(message).not.toContain(good.url);
    const statuses = (error as EngineError).data!.engines as EngineHealthStatus[];
    expect(statuses.map((s) => s.state)).toEqual(['healthy', 'flapping']);
  });

  it('fails after the deadline naming every engine that never came up and its first error', async () => {
    const never = await engine({ script: { type: 'never-healthy' } });
    const refused = await closedPort();
    const t0 = performance.now();
    const error = (await waitForEngines([never.url, refused], { deadline: '1s', ...fast }).catch(
      (e) => e,
    )) as EngineError;
    const elapsed = performance.now() - t0;
    // It fails at its deadline: not before, and not a checking round later (a margin of ten deadlines
    // absorbs a loaded machine; the deadline, not the machine, decides when it gives up).
    expect(elapsed).toBeGreaterThanOrEqual(950);
    expect(elapsed).toBeLessThan(10 * 1_000);
    expect(error.isRetryable).toBe(false);
    expect(error.message).toContain(`${never.url} (starting,`);
    expect(error.message).toContain('first error: HTTP 503');
    expect(error.message).toMatch(
      new RegExp(
        `${refused.replaceAll('.', '\\.')} \\(unreachable, \\d+ checks; first error: connect ECONNREFUSED`,
      ),
    );
  });

  it('stops promptly when aborted and rejects with the reason', async () => {
    const never = await engine({ script: { type: 'never-healthy' } });
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('operator cancelled')), 150);
    const t0 = performance.now();
    await expect(
      waitForEngines([never.url], { deadline: '10m', signal: controller.signal, ...fast }),
    ).rejects.toThrow('operator cancelled');
    // Long before its 10-minute deadline: the abort, not the deadline, ended the wait.
    expect(performance.now() - t0).toBeLessThan(60_000);
  });

  it('rejects a malformed deadline with the fix', async () => {
    await expect(waitForEngines(['http://127.0.0.1:1'], { deadline: '30 minutes' })).rejects.toThrow(
      /deadline: "30 minutes" is not a duration.*"30m"/,
    );
  });

  it('refuses a URL that is not http(s) before polling anything', async () => {
    for (const url of ['notaurl', 'localhost:30000', 'ftp://127.0.0.1:1', 'http://', '']) {
      const error = await waitForEngines(['http://127.0.0.1:1', url], { deadline: '1h' }).catch(
        (e: unknown) => e,
      );
      expect(ConfigError.isInstance(error), url).toBe(true);
      expect((error as Error).message).toContain(`engine URL ${JSON.stringify(url)} is not an http(s) URL`);
    }
  });
});
