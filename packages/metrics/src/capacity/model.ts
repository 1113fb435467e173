/**
 * A discrete-event model of one RL step of an agentic run: every rollout claims a sandbox, alternates
 * model turns (a decode request to an engine) with sandbox commands, and is graded; engines share their
 * decode throughput among the requests they run (processor sharing) and admit requests only while their
 * KV cache holds the contexts; training and the weight update follow the rollout (sync) or overlap the
 * next step's rollout (async, slime's `train_async.py` schedule). Pure computation, deterministic.
 */

/** What one step of the run does, in the units a run's metrics give (seconds, tokens). */
export interface StepModel {
  /** Rollouts per step (the global batch: prompts × samples per prompt). */
  rolloutsPerStep: number;
  /** Rollouts running at once (default: all of the step's). */
  concurrency?: number | undefined;
  /** Sandboxes that may be claimed at once (default: one per concurrent rollout). */
  sandboxes?: number | undefined;
  /** Model turns per rollout, spread evenly between `min` and `max` over the step's rollouts. */
  turns: { min: number; max: number };
  /** Tokens decoded per turn. */
  tokensPerTurn: number;
  /** Context of the first turn (system prompt + task). */
  promptTokens: number;
  /** Tokens a turn adds to the context besides its output (the command's observation). */
  observationTokens: number;
  /** Sandbox time per turn (the agent's command). */
  execSecPerTurn: number;
  /** Per rollout: sandbox claim + setup, and grading. */
  claimSec: number;
  evalSec: number;
  engine: EngineModel;
  trainSec: number;
  updateWeightsSec: number;
}

/** One engine's throughput in the capacity model. */
export interface EngineModel {
  /** Decode tokens/s of one engine with a full batch (aggregate over its requests). */
  decodeTokensPerSec: number;
  /** Running requests at which an engine reaches half of `decodeTokensPerSec`. */
  halfBatch: number;
  /** KV-cache capacity of one engine, in tokens (requests wait in its queue beyond it). */
  kvTokens: number;
  /** Most requests one engine runs at once. */
  maxRunning: number;
}

/** The predicted rollout phase of a step. */
export interface RolloutPhaseResult {
  /** Seconds from the first claim to the last graded rollout. */
  rolloutSec: number;
  /** Per engine, over the rollout phase (readings once a second). */
  queuePeak: number[];
  queueMedian: number[];
  runningPeak: number[];
  runningMedian: number[];
  kvPeak: number[];
  /** Mean requests in engines (running + queued, all engines) over the phase. */
  meanInEngine: number;
  /** Most sandboxes held at once. */
  sandboxPeak: number;
}

/** A predicted step: rollout, training and weight update. */
export interface StepPrediction extends RolloutPhaseResult {
  engines: number;
  mode: 'sync' | 'async';
  /** Trainer-side step time: rollout (or its unhidden part) + train + weight update. */
  stepSec: number;
  trainSec: number;
  updateWeightsSec: number;
}

interface Agent {
  engine: number;
  turns: number;
  turn: number;
  /** `wake` time for claim/exec/eval waits; `Infinity` while at an engine. */
  wake: number;
  state: 'claim' | 'exec' | 'eval' | 'engine' | 'done' | 'waiting-sandbox';
  remaining: number;
  context: number;
}

const EPS = 1e-9;

function nearestRankMedian(values: number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(sorted.length / 2) - 1)]!;
}

/** Simulate one step's rollout phase on `engines` engines. */
export function simulateRolloutPhase(model: StepModel, engines: number): RolloutPhaseResult {
  const n = model.rolloutsPerStep;
  const concurrency = Math.min(n, model.concurrency ?? n);
  let sandboxesFree = model.sandboxes ?? concurrency;
  const { decodeTokensPerSec, halfBatch, kvTokens, maxRunning } = model.engine;
  const agents: Agent[] = [];
  for (let i = 0; i < n; i++) {
    // Evenly spread quantiles: the longest rollouts make the step's tail.
    const q = n === 1 ? 1 : i / (n - 1);
    agents.push({
      engine: i % engines,
      turns: Math.max(1, Math.round(model.turns.min + q * (model.turns.max - model.turns.min))),
      turn: 0,
      wake: Number.POSITIVE_INFINITY,
      state: 'waiting-sandbox',
      remaining: 0,
      context: model.promptTokens,
    });
  }
  const running: number[][] = Array.from({ length: engines }, () => []);
  const queues: number[][] = Array.from({ length: engines }, () => []);
  const kvUsed = new Array<number>(engines).fill(0);
  let started = 0;
  let done = 0;
  let t = 0;
  let heldSandboxes = 0;
  let sandboxPeak = 0;
  const readings = Array.from({ length: engines }, () => ({
    queue: [] as number[],
    running: [] as number[],
    kv: [] as number[],
  }));
  let inEngineArea = 0;
  let nextReading = 0;

  const rate = (e: number) => {
    const b = running[e]!.length;
    return b === 0 ? 0 : decodeTokensPerSec / (b + halfBatch);
  };
  const need = (a: Agent) => a.context + model.tokensPerTurn;
  const admit = (e: number) => {
    const q = queues[e]!;
    while (q.length > 0 && running[e]!.length < maxRunning) {
      const i = q[0]!;
      const a = agents[i]!;
      // A request that alone exceeds the cache still runs (the engine would truncate or evict it).
      if (running[e]!.length > 0 && kvUsed[e]! + need(a) > kvTokens) break;
      q.shift();
      kvUsed[e]! += need(a);
      running[e]!.push(i);
    }
  };
  const startRollouts = () => {
    while (started < n && started - done < concurrency && sandboxesFree > 0) {
      const a = agents[started]!;
      sandboxesFree--;
      heldSandboxes++;
      sandboxPeak = Math.max(sandboxPeak, heldSandboxes);
      a.state = 'claim';
      a.wake = t + model.claimSec;
      started++;
    }
  };
  const toEngine = (i: number) => {
    const a = agents[i]!;
    a.state = 'engine';
    a.wake = Number.POSITIVE_INFINITY;
    a.remaining = model.tokensPerTurn;
    queues[a.engine]!.push(i);
    admit(a.engine);
  };

  startRollouts();
  // Indices of agents by state change; n is small (hundreds), so plain scans stay cheap.
  for (let guard = 0; done < n && guard < 10_000_000; guard++) {
    let next = Number.POSITIVE_INFINITY;
    for (const a of agents) if (a.wake < next) next = a.wake;
    for (let e = 0; e < engines; e++) {
      const r = rate(e);
      if (r <= 0) continue;
      let least = Number.POSITIVE_INFINITY;
      for (const i of running[e]!) least = Math.min(least, agents[i]!.remaining);
      next = Math.min(next, t + least / r);
    }
    if (!Number.isFinite(next)) throw new Error('simulation stalled: no event pending');
    // Readings once a second (like a scrape) between now and the next event.
    while (nextReading <= next) {
      for (let e = 0; e < engines; e++) {
        readings[e]!.queue.push(queues[e]!.length);
        readings[e]!.running.push(running[e]!.length);
        readings[e]!.kv.push(kvUsed[e]! / kvTokens);
      }
      nextReading += 1;
    }
    const dt = next - t;
    for (let e = 0; e < engines; e++) {
      inEngineArea += (running[e]!.length + queues[e]!.length) * dt;
      const r = rate(e);
      for (const i of running[e]!) agents[i]!.remaining -= r * dt;
    }
    t = next;
    for (let e = 0; e < engines; e++) {
      const finished = running[e]!.filter((i) => agents[i]!.remaining <= EPS * model.tokensPerTurn + EPS);
      if (finished.length === 0) continue;
      running[e] = running[e]!.filter((i) => !finished.includes(i));
      for (const i of finished) {
        const a = agents[i]!;
        kvUsed[e]! -= need(a);
        a.turn++;
        a.context += model.tokensPerTurn + model.observationTokens;
        if (a.turn >= a.turns) {
          a.state = 'eval';
          a.wake = t + model.evalSec;
        } else {
          a.state = 'exec';
          a.wake = t + model.execSecPerTurn;
        }
      }
      admit(e);
    }
    for (let i = 0; i < n; i++) {
      const a = agents[i]!;
      if (a.wake > t + EPS) continue;
      if (a.state === 'claim' || a.state === 'exec') toEngine(i);
      else if (a.state === 'eval') {
        a.state = 'done';
        a.wake = Number.POSITIVE_INFINITY;
        done++;
        heldSandboxes--;
        sandboxesFree++;
        startRollouts();
      }
    }
  }
  return {
    rolloutSec: t,
    queuePeak: readings.map((r) => Math.max(0, ...r.queue)),
    queueMedian: readings.map((r) => nearestRankMedian(r.queue)),
    runningPeak: readings.map((r) => Math.max(0, ...r.running)),
    runningMedian: readings.map((r) => nearestRankMedian(r.running)),
    kvPeak: readings.map((r) => Math.max(0, ...r.kv)),
    meanInEngine: t > 0 ? inEngineArea / t : 0,
    sandboxPeak,
  };
}

/**
 * Predict a step on `engines` engines. Sync: rollout, then train, then the weight update. Async (slime's
 * `train_async.py`): the next step's rollout overlaps training, and the weight update waits for both,
 * so a step takes max(rollout, train) + update.
 */
export function simulateStep(model: StepModel, engines: number, mode: 'sync' | 'async'): StepPrediction {
  const phase = simulateRolloutPhase(model, engines);
  const stepSec =
    mode === 'sync'
      ? phase.rolloutSec + model.trainSec + model.updateWeightsSec
      : Math.max(phase.rolloutSec, model.trainSec) + model.updateWeightsSec;
  return {
    ...phase,
    engines,
    mode,
    stepSec,
    trainSec: model.trainSec,
    updateWeightsSec: model.updateWeightsSec,
  };
}
