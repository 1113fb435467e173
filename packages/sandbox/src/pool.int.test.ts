import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { localProvider } from './host/local-provider.js';
import { WarmPool } from './pool.js';
import type { Sandbox, SandboxEvents, SandboxProvider } from './types.js';

const rootDir = mkdtempSync(join(tmpdir(), 'vime-pool-test-'));
afterAll(() => rmSync(rootDir, { recursive: true, force: true }));
const spec = { workdir: '/testbed', labels: { 'vime.run': 'pool-test' } };
const pools: WarmPool[] = [];

function track(pool: WarmPool): WarmPool {
  pools.push(pool);
  return pool;
}

/** Live sandboxes as the provider's own events count them, with the maximum reached. */
function liveCounter(provider: SandboxProvider) {
  const state = { live: 0, max: 0, creates: 0 };
  provider.events.on('create', () => {
    state.creates++;
    state.live++;
    state.max = Math.max(state.max, state.live);
  });
  provider.events.on('terminate', () => {
    state.live--;
  });
  return state;
}

afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
});

describe('WarmPool', () => {
  it('pre-warms, serves warm claims, refills after release and leaves nothing after close', async () => {
    const provider = bubblewrapProvider({ rootDir });
    const claims: Parameters<SandboxEvents['claim']>[0][] = [];
    provider.events.on('claim', (e) => claims.push(e));
    const pool = track(new WarmPool(provider, { spec, size: 3, name: 'warm-test' }));
    await pool.ready();
    expect(pool.stats()).toMatchObject({ idle: 3, live: 3, warmHits: 0, fallbacks: 0 });

    const sbx = await pool.claim();
    expect((await sbx.exec('echo hi')).stdout).toBe('hi\n');
    expect(sbx.labels['vime.pool']).toBe('warm-test');
    expect(claims).toEqual([expect.objectContaining({ id: sbx.id, pool: 'warm-test', warm: true })]);
    await pool.release(sbx);
    await pool.ready();
    expect(pool.stats()).toMatchObject({ idle: 3, claimed: 0, live: 3, warmHits: 1 });
    expect(await sbx.isAlive()).toBe(false);

    await pool.close();
    expect(pool.stats().live).toBe(0);
    expect(readdirSync(rootDir).filter((n) => n.startsWith('sbx-'))).toEqual([]);
    await expect(pool.claim()).rejects.toSatisfy(
      (e) => SandboxError.isInstance(e) && e.code === 'pool_closed',
    );
  });

  it('falls back to on-demand creates beyond the warm set and counts them', async () => {
    const provider = localProvider({ rootDir });
    const pool = track(new WarmPool(provider, { spec, size: 4, maxLive: 20 }));
    await pool.ready();
    const claimed = await Promise.all(Array.from({ length: 10 }, () => pool.claim()));
    expect(new Set(claimed.map((s) => s.id)).size).toBe(10);
    const stats = pool.stats();
    expect(stats.warmHits).toBe(4);
    expect(stats.fallbacks).toBe(6);
    expect(stats.claimed).toBe(10);
    await Promise.all(claimed.map((s) => pool.release(s)));
  });

  it('bounds live sandboxes (creating + idle + claimed), not requests', async () => {
    const provider = localProvider({ rootDir });
    const counter = liveCounter(provider);
    const pool = track(new WarmPool(provider, { spec, size: 1, maxLive: 2 }));
    await pool.ready();
    const a = await pool.claim();
    const b = await pool.claim();
    let thirdDone = false;
    const third = pool.claim().then((s) => {
      thirdDone = true;
      return s;
    });
    await new Promise((r) => setTimeout(r, 200));
    expect(thirdDone).toBe(false);
    expect(pool.stats().live).toBe(2);
    await pool.release(a);
    const c = await third;
    expect(counter.max).toBeLessThanOrEqual(2);
    await Promise.all([pool.release(b), pool.release(c)]);
    await pool.ready();
    expect(counter.max).toBeLessThanOrEqual(2);
  });

  it('replaces a warm sandbox that died while idle', async () => {
    const provider = localProvider({ rootDir });
    const pool = track(new WarmPool(provider, { spec, size: 1 }));
    await pool.ready();
    // Kill it behind the pool's back: its state folder disappears, as after a host cleanup.
    for (const n of readdirSync(rootDir).filter((x) => x.startsWith('sbx-'))) {
      rmSync(join(rootDir, n), { recursive: true, force: true });
    }
    const sbx = await pool.claim();
    expect(await sbx.isAlive()).toBe(true);
    expect(pool.stats().deadOnClaim).toBe(1);
    await pool.release(sbx);
  });

  it('limits the creation rate', async () => {
    const provider = localProvider({ rootDir });
    const pool = track(new WarmPool(provider, { spec, size: 0, maxLive: 20, createsPerSecond: 5 }));
    const t0 = performance.now();
    // A full bucket allows a burst of 5; the other 5 wait 200 ms each.
    const claimed = await Promise.all(Array.from({ length: 10 }, () => pool.claim()));
    expect(performance.now() - t0).toBeGreaterThanOrEqual(900);
    await Promise.all(claimed.map((s) => pool.release(s)));
  });

  it('backs off failed refills, reports them, and recovers', async () => {
    const logged: string[] = [];
    const real = localProvider({ rootDir, logger: { warn: (message) => logged.push(message) } });
    let failuresLeft = 2;
    const flaky: SandboxProvider = {
      name: 'flaky',
      events: real.events,
      create: (s, o) => {
        if (failuresLeft-- > 0) return Promise.reject(new SandboxError('engine hiccup'));
        return real.create(s, o);
      },
    };
    const warnings: string[] = [];
    real.events.on('warning', (w) => warnings.push(w.message));
    const pool = track(new WarmPool(flaky, { spec, size: 1 }));
    await pool.ready({ signal: AbortSignal.timeout(10_000) });
    expect(pool.stats().refillFailures).toBe(2);
    expect(warnings.filter((w) => w.includes('background create failed'))).toHaveLength(2);
    expect(logged).toEqual(warnings);
  });

  it('resizes, drains and still serves cold claims after draining', async () => {
    const provider = localProvider({ rootDir });
    const pool = track(new WarmPool(provider, { spec, size: 2, maxLive: 8 }));
    await pool.ready();
    await pool.resize(4);
    await pool.ready();
    expect(pool.stats().idle).toBe(4);
    await pool.resize(1);
    expect(pool.stats().idle).toBe(1);
    await pool.drain();
    expect(pool.stats()).toMatchObject({ idle: 0, live: 0, size: 0 });
    const sbx = await pool.claim();
    expect(pool.stats().fallbacks).toBe(1);
    await pool.release(sbx);
  });

  it('keeps at most refillConcurrency background creates in flight', async () => {
    const real = localProvider({ rootDir });
    let inFlight = 0;
    let maxInFlight = 0;
    const counting: SandboxProvider = {
      name: 'counting',
      events: real.events,
      create: async (s, o) => {
        maxInFlight = Math.max(maxInFlight, ++inFlight);
        try {
          return await real.create(s, o);
        } finally {
          inFlight--;
        }
      },
    };
    const pool = track(new WarmPool(counting, { spec, size: 12, maxLive: 24, refillConcurrency: 3 }));
    await pool.ready();
    expect(pool.stats().idle).toBe(12);
    expect(maxInFlight).toBe(3);
  });

  it('rejects a size larger than maxLive, naming the fix', () => {
    expect(() => new WarmPool(localProvider({ rootDir }), { spec, size: 8, maxLive: 4 })).toThrow(
      /raise maxLive/,
    );
  });

  it('close fails waiting claims and terminates claimed sandboxes', async () => {
    const provider = localProvider({ rootDir });
    const pool = new WarmPool(provider, { spec, size: 0, maxLive: 1 });
    const held: Sandbox = await pool.claim();
    const waiting = pool.claim().then(
      () => 'claimed',
      (e: unknown) => e,
    );
    await pool.close();
    expect(await waiting).toSatisfy((e) => SandboxError.isInstance(e) && e.code === 'pool_closed');
    expect(await held.isAlive()).toBe(false);
  });

  it('a waiting claim honours its abort signal', async () => {
    const provider = localProvider({ rootDir });
    const pool = track(new WarmPool(provider, { spec, size: 0, maxLive: 1 }));
    const held = await pool.claim();
    await expect(pool.claim({ signal: AbortSignal.timeout(100) })).rejects.toThrow();
    await pool.release(held);
    const next = await pool.claim({ signal: AbortSignal.timeout(5000) });
    await pool.release(next);
  });
});

describe('WarmPool.ready when sandboxes cannot be made', () => {
  const stillWaiting = (ms: number) =>
    new Promise((resolve) => setTimeout(() => resolve('still waiting'), ms).unref());

  it('rejects naming the pool and the cause when prepare always fails, or the provider cannot create', async () => {
    const notADir = join(rootDir, 'not-a-dir');
    writeFileSync(notADir, '');
    const broken: Array<[string, WarmPool]> = [
      [
        'the checkout failed',
        new WarmPool(bubblewrapProvider({ rootDir }), {
          spec,
          size: 2,
          name: 'bad-prepare',
          prepare: async () => {
            throw new Error('the checkout failed');
          },
        }),
      ],
      [
        'not-a-dir',
        new WarmPool(bubblewrapProvider({ rootDir: notADir }), { spec, size: 2, name: 'bad-root' }),
      ],
    ];
    for (const [cause, pool] of broken) {
      track(pool);
      const outcome = await Promise.race([
        pool.ready().then(
          () => 'ready',
          (e: unknown) => e,
        ),
        stillWaiting(20_000),
      ]);
      expect(outcome).toSatisfy((e) => SandboxError.isInstance(e));
      expect((outcome as Error).message).toMatch(new RegExp(`^pool ${pool.name} cannot fill: .*${cause}`));
      expect(pool.stats().refillFailures).toBeGreaterThanOrEqual(3);
    }
  });

  it('one failed create is retried: ready still resolves', async () => {
    let failures = 1;
    const pool = track(
      new WarmPool(bubblewrapProvider({ rootDir }), {
        spec,
        size: 2,
        name: 'flaky-prepare',
        prepare: async () => {
          if (failures-- > 0) throw new Error('a transient failure');
        },
      }),
    );
    await pool.ready();
    expect(pool.stats()).toMatchObject({ idle: 2, refillFailures: 1 });
  });
});
