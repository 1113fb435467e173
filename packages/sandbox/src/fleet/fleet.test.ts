/**
 * The fleet's shaping and health, against in-process STAND-IN backends (this file tests the fleet's
 * limiter, starting cap, placement and draining, not a backend): each stand-in records when and how often
 * it is asked to create, and answers as a rate-limited or failing service would. The real path, three
 * remote Docker engines over TLS, is `remote-docker.int.test.ts`.
 */

import { ConfigError, SandboxError } from '@vime/core';
import { EventEmitter } from 'eventemitter3';
import { afterEach, describe, expect, it } from 'vitest';
import { BACKEND_LOST, SandboxRateLimited } from '../errors.js';
import type { ExecResult, Sandbox, SandboxEmitter, SandboxProvider, SandboxSpec } from '../types.js';
import { type FleetProvider, fleetProvider } from './fleet.js';

interface StandIn extends SandboxProvider {
  /** `performance.now()` of every create call, as it arrived. */
  calls: number[];
  refused: number;
  specs: SandboxSpec[];
  inFlight: number;
  maxInFlight: number;
}

/** A stand-in backend; `answer` decides each create (throw to fail), `hold` delays its answer. */
function standIn(
  name: string,
  answer: (p: StandIn) => void = () => {},
  hold: () => Promise<void> = async () => {},
  exec: (signal?: AbortSignal) => Promise<ExecResult> = async () => okResult,
): StandIn {
  let n = 0;
  const p: StandIn = {
    name,
    events: new EventEmitter() as SandboxEmitter,
    calls: [],
    refused: 0,
    specs: [],
    inFlight: 0,
    maxInFlight: 0,
    async create(spec) {
      p.calls.push(performance.now());
      p.specs.push(spec);
      p.inFlight++;
      p.maxInFlight = Math.max(p.maxInFlight, p.inFlight);
      try {
        answer(p);
        await hold();
      } finally {
        p.inFlight--;
      }
      const id = `${name}-${n++}`;
      const sandbox: Sandbox = {
        id,
        provider: name,
        workdir: spec.workdir,
        labels: spec.labels ?? {},
        capabilities: { persistentProcesses: true, isolatedNetwork: true },
        exec: (_command, options) => exec(options?.signal),
        writeFile: async () => {},
        readFile: async () => new Uint8Array(),
        readTextFile: async () => '',
        copyIn: async () => {},
        isAlive: async () => true,
        terminate: async () => {},
      };
      return sandbox;
    },
  };
  return p;
}

const okResult: ExecResult = {
  exitCode: 0,
  stdout: '',
  stderr: '',
  output: '',
  timedOut: false,
  truncated: false,
  durationMs: 1,
};
const spec: SandboxSpec = { workdir: '/testbed' };

/** Most calls inside any window of `windowMs` (half-open: a call exactly `windowMs` later is the next window). */
function mostInWindow(calls: number[], windowMs: number): number {
  let most = 0;
  for (let i = 0, j = 0; i < calls.length; i++) {
    while (calls[i]! - calls[j]! >= windowMs) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}

const fleets: FleetProvider[] = [];
function fleet(options: Parameters<typeof fleetProvider>[0]): FleetProvider {
  const f = fleetProvider(options);
  fleets.push(f);
  return f;
}
afterEach(async () => {
  await Promise.all(fleets.splice(0).map((f) => f.close()));
});

describe('creation rate', () => {
  it('never sends a backend that refuses beyond 5 creates a second more than that, and no create fails', async () => {
    // The stand-in answers 429 once 5 creates arrived within the last second (less 1 ms for reading the
    // clock a moment after the fleet did).
    const backend = standIn('rated', (p) => {
      const now = p.calls.at(-1)!;
      if (p.calls.filter((t) => t > now - 999).length > 5) {
        p.refused++;
        throw new SandboxRateLimited('429 too many creates', { retryAfterMs: 1000 });
      }
    });
    const f = fleet({
      backends: [{ name: 'rated', provider: backend, capacity: 100, createsPerSecond: 5 }],
      lifetimeMs: 60_000,
      maxStarting: 20,
    });
    const made = await Promise.all(Array.from({ length: 16 }, () => f.create(spec)));
    expect(made).toHaveLength(16);
    expect(backend.refused).toBe(0);
    expect(backend.calls).toHaveLength(16);
    expect(mostInWindow(backend.calls, 1000)).toBeLessThanOrEqual(5);
    expect(f.stats()[0]).toMatchObject({ created: 16, failed: 0, rateLimited: 0, live: 16 });
  });

  it("honours a 429's Retry-After: nothing reaches that backend before it, and the creates still succeed", async () => {
    const pausedUntil: number[] = [];
    let early = 0;
    const backend = standIn('strict', (p) => {
      const now = p.calls.at(-1)!;
      if (now < (pausedUntil.at(-1) ?? 0)) early++;
      if (p.calls.length % 4 === 0) {
        pausedUntil.push(now + 300);
        throw new SandboxRateLimited('429 slow down', { retryAfterMs: 300 });
      }
    });
    const f = fleet({
      backends: [{ name: 'strict', provider: backend, capacity: 100, createsPerSecond: 1000, burst: 10 }],
      lifetimeMs: 60_000,
      // One create at a time, so that every call is sent after the answer before it (calls already on
      // the wire when a 429 is answered cannot honour it).
      maxStarting: 1,
    });
    const warnings: string[] = [];
    f.events.on('warning', (w) => warnings.push(w.code ?? ''));
    const made = await Promise.all(Array.from({ length: 9 }, () => f.create(spec)));
    expect(made).toHaveLength(9);
    // 9 created, each 4th call refused: 11 calls, 2 refusals, none sent before the pause it was told.
    expect(backend.calls).toHaveLength(11);
    expect(pausedUntil).toHaveLength(2);
    expect(early).toBe(0);
    expect(warnings.filter((c) => c === 'rate_limited')).toHaveLength(2);
    expect(f.stats()[0]).toMatchObject({ created: 9, rateLimited: 2, failed: 0 });
  });
});

describe('starting cap and capacity', () => {
  it('keeps at most maxStarting creates in flight, and all complete', async () => {
    const gates: Array<() => void> = [];
    const backend = standIn(
      'slow',
      () => {},
      () => new Promise<void>((r) => gates.push(r)),
    );
    const f = fleet({
      backends: [{ name: 'slow', provider: backend, capacity: 50 }],
      lifetimeMs: 60_000,
      maxStarting: 3,
    });
    const all = Promise.all(Array.from({ length: 10 }, () => f.create(spec)));
    let opened = 0;
    while (opened < 10) {
      await until(
        () => gates.length > opened,
        'the next create to reach the backend',
        () => gates.length,
      );
      expect(backend.inFlight).toBeLessThanOrEqual(3);
      gates[opened++]!();
    }
    expect((await all).length).toBe(10);
    expect(backend.maxInFlight).toBe(3);
  });

  it('places by free capacity and waits for a slot when every backend is full', async () => {
    const a = standIn('a');
    const b = standIn('b');
    const f = fleet({
      backends: [
        { name: 'a', provider: a, capacity: 1 },
        { name: 'b', provider: b, capacity: 2 },
      ],
      lifetimeMs: 60_000,
    });
    const first = await Promise.all([f.create(spec), f.create(spec), f.create(spec)]);
    expect([a.calls.length, b.calls.length]).toEqual([1, 2]);
    let fourth: Sandbox | undefined;
    const waiting = f.create(spec).then((s) => {
      fourth = s;
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(fourth).toBeUndefined();
    await first.find((s) => s.labels['vime.backend'] === 'a')!.terminate();
    await waiting;
    expect(fourth?.labels['vime.backend']).toBe('a');
    expect(f.stats().map((s) => s.live)).toEqual([1, 2]);
  });

  it('stamps the run label and the lifetime on every spec it places, keeping a spec of its own', async () => {
    const a = standIn('a');
    const f = fleet({
      backends: [{ name: 'a', provider: a, capacity: 5 }],
      lifetimeMs: 7_200_000,
      run: 'run-fleet',
    });
    await f.create(spec);
    await f.create({ ...spec, labels: { 'vime.run': 'mine' }, lifetimeMs: 1000 });
    expect(a.specs.map((s) => [s.labels?.['vime.run'], s.labels?.['vime.backend'], s.lifetimeMs])).toEqual([
      ['run-fleet', 'a', 7_200_000],
      ['mine', 'a', 1000],
    ]);
  });
});

describe('health', () => {
  it('drains a backend whose creates fail, tries it again after a rest, and puts it back when it creates', async () => {
    let broken = true;
    const bad = standIn('bad', () => {
      if (broken) throw new SandboxError('engine says no');
    });
    const good = standIn('good');
    const f = fleet({
      backends: [
        { name: 'bad', provider: bad, capacity: 10 },
        { name: 'good', provider: good, capacity: 10 },
      ],
      lifetimeMs: 60_000,
      drainAfter: 2,
      retryDrainedMs: 300,
    });
    const warnings: string[] = [];
    f.events.on('warning', (w) => warnings.push(`${w.code}:${w.data?.backend}`));
    // Sequential: each failed create moves on to `good`; after two failures `bad` is drained.
    for (let i = 0; i < 8; i++) await f.create(spec);
    expect(bad.calls).toHaveLength(2);
    expect(good.calls).toHaveLength(8);
    expect(warnings).toEqual(['backend_drained:bad']);
    expect(f.stats()[0]).toMatchObject({ healthy: false, failed: 2, live: 0 });
    // After its rest, exactly one create tries it; that one fails too: drained again, the create goes on.
    await new Promise((r) => setTimeout(r, 350));
    await Promise.all([f.create(spec), f.create(spec)]);
    expect(bad.calls).toHaveLength(3);
    expect(warnings).toEqual(['backend_drained:bad', 'backend_drained:bad']);
    broken = false;
    await new Promise((r) => setTimeout(r, 350));
    const back = await f.create(spec);
    expect(back.labels['vime.backend']).toBe('bad');
    expect(f.stats()[0]).toMatchObject({ healthy: true, live: 1 });
  });

  it('fails a create with every try named when no backend can create', async () => {
    const f = fleet({
      backends: [
        {
          name: 'x',
          provider: standIn('x', () => {
            throw new SandboxError('disk full');
          }),
          capacity: 1,
        },
        {
          name: 'y',
          provider: standIn('y', () => {
            throw new SandboxError('no image');
          }),
          capacity: 1,
        },
      ],
      lifetimeMs: 60_000,
      createAttempts: 2,
    });
    const error = await f.create(spec).catch((e: unknown) => e);
    expect(SandboxError.isInstance(error) && error.code).toBe('sandbox_unavailable');
    expect((error as Error).message).toMatch(/x: disk full; y: no image/);
  });

  it('fails the operations of a lost backend as sandbox_backend_lost, in flight ones too; the others go on', async () => {
    let reachable = true;
    // A command that runs until its signal aborts, as a real backend's exec does.
    const hang = (signal?: AbortSignal) =>
      new Promise<ExecResult>((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason)));
    const lostOne = standIn(
      'lost',
      () => {},
      async () => {},
      hang,
    );
    const fine = standIn('fine');
    const f = fleet({
      backends: [
        {
          name: 'lost',
          provider: lostOne,
          capacity: 1,
          ping: async () => {
            if (!reachable) throw new SandboxError('connection refused', { code: 'sandbox_unavailable' });
          },
        },
        { name: 'fine', provider: fine, capacity: 1 },
      ],
      lifetimeMs: 60_000,
      pingIntervalMs: 50,
    });
    const [s1, s2] = await Promise.all([f.create(spec), f.create(spec)]);
    const onLost = [s1, s2].find((s) => s!.labels['vime.backend'] === 'lost')!;
    const onFine = [s1, s2].find((s) => s!.labels['vime.backend'] === 'fine')!;
    const inFlight = onLost.exec('sleep 1000').catch((e: unknown) => e);
    reachable = false; // the next ping finds it gone and aborts what is in flight
    const error = await inFlight;
    expect(SandboxError.isInstance(error) && error.code).toBe(BACKEND_LOST);
    expect((error as Error).message).toMatch(/fleet backend lost stopped answering/);
    const later = await onLost.writeFile('a', 'b').catch((e: unknown) => e);
    expect(SandboxError.isInstance(later) && later.code).toBe(BACKEND_LOST);
    expect(await onLost.isAlive()).toBe(false);
    expect((await onFine.exec('true')).exitCode).toBe(0);
    expect(f.stats()[0]).toMatchObject({ lost: true, healthy: false });
    await onLost.terminate();
    expect(f.stats()[0]!.live).toBe(0);
  });

  it('without a ping, an operation that cannot reach its backend (sandbox_unavailable) makes the backend lost', async () => {
    const unreachable = standIn(
      'gone',
      () => {},
      async () => {},
      async () => {
        throw new SandboxError('cannot reach the engine: ECONNREFUSED', { code: 'sandbox_unavailable' });
      },
    );
    const f = fleet({ backends: [{ name: 'gone', provider: unreachable, capacity: 2 }], lifetimeMs: 60_000 });
    const [a, b] = await Promise.all([f.create(spec), f.create(spec)]);
    const first = await a!.exec('true').catch((e: unknown) => e);
    expect(SandboxError.isInstance(first) && first.code).toBe(BACKEND_LOST);
    // Its sibling on the same backend is lost too, before it sends anything.
    const second = await b!.readTextFile('x').catch((e: unknown) => e);
    expect(SandboxError.isInstance(second) && second.code).toBe(BACKEND_LOST);
  });

  it('refuses bad options with the field, the value and the fix', () => {
    const p = standIn('p');
    expect(() => fleetProvider({ backends: [], lifetimeMs: 1000 })).toThrow(/at least one backend/);
    expect(() =>
      fleetProvider({ backends: [{ name: 'p', provider: p, capacity: 0 }], lifetimeMs: 1000 }),
    ).toThrow(/backends\[0\]\.capacity \(p\) must be a whole number >= 1, got 0/);
    expect(() =>
      fleetProvider({
        backends: [{ name: 'p', provider: p, capacity: 1, createsPerSecond: -1 }],
        lifetimeMs: 1000,
      }),
    ).toThrow(/createsPerSecond \(p\) must be a number > 0, got -1/);
    expect(() =>
      fleetProvider({
        backends: [{ name: 'p', provider: p, capacity: 1 }],
        lifetimeMs: undefined as unknown as number,
      }),
    ).toThrow(ConfigError);
    expect(() =>
      fleetProvider({
        backends: [
          { name: 'p', provider: p, capacity: 1 },
          { name: 'p', provider: p, capacity: 1 },
        ],
        lifetimeMs: 1000,
      }),
    ).toThrow(/backends\[1\]\.name must be a unique/);
  });
});

async function until(check: () => boolean, what: string, seen: () => unknown): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`waited 10 s for ${what}; saw ${JSON.stringify(seen())}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
