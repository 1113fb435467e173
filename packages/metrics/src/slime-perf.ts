import type { RolloutResult } from '@vime/core';
import { type PyValue, parsePythonLiteral } from './python-literal.js';

/** One training step as slime's `perf {rollout_id}: {...}` lines report it (seconds). */
export interface PerfStep {
  rolloutId: number;
  /** `perf/step_time` = train_wait + train. */
  stepTime?: number | undefined;
  /** `perf/rollout_time` (rollout side). */
  rolloutTime?: number | undefined;
  /** `perf/train_time`. */
  trainTime?: number | undefined;
  /** `perf/train_wait_time`: the trainer waiting for rollout data. */
  trainWaitTime?: number | undefined;
  /** `perf/update_weights_time` (the update performed after the previous step). */
  updateWeightsTime?: number | undefined;
  /** `perf/wait_time_ratio` = train_wait / step_time. */
  waitTimeRatio?: number | undefined;
  /** Log time of the last perf line of the step, as written (`YYYY-MM-DD HH:MM:SS`). */
  loggedAt?: string | undefined;
  /** Every key of the step's perf lines (rollout and train side merged), e.g. `rollout/raw_reward`. */
  metrics: Record<string, PyValue>;
  /** `[metrics] step=N k=v …` values printed by a custom rollout-log hook (pass@k, timing). */
  agent?: Record<string, number> | undefined;
  /**
   * The trainer's `step K: {'train/loss': …}` lines of this rollout (actor only), each numeric key the mean
   * over the rollout's optimizer steps.
   */
  train?: Record<string, number> | undefined;
  /** How many optimizer steps (`step K:` lines) the rollout trained with. */
  trainSteps?: number | undefined;
}

/** slime's perf lines parsed: one entry per step. */
export interface SlimePerfLog {
  steps: PerfStep[];
  lines: number;
  /** Lines that were neither perf, `[metrics]` nor `[agent]` lines. */
  ignored: number;
  /** Perf and trainer `step K:` lines whose dict could not be read. */
  malformed: number;
  malformedLines: number[];
  /** Rollouts seen in `[agent] <task>: reward=…` / `[agent] <task> aborted: …` lines. */
  rollouts: { completed: number; aborted: number };
  /** Each `[agent]` line, in log order. */
  agentLines: AgentLine[];
  /** The trainer's `step K: {'train/…': …}` lines. */
  trainLines: number;
  /** Of those, lines no train-side `perf N:` line followed, so no rollout could be named for them. */
  unattributedTrainLines: number;
}

/**
 * One rollout as the example's rollout hook logs it: `[agent] <task>: reward=R exit=E turns=N … claim=Xs
 * agent=Ys eval=Zs exec=Ws(n=K)` or `[agent] <task> aborted: <cause>`. `step` is the rollout id of the
 * last `perf N:` or `[metrics] step=N` line before it, else 0.
 */
export interface AgentLine {
  task: string;
  step: number;
  status: 'completed' | 'aborted';
  reward?: number | undefined;
  cause?: string | undefined;
  exit?: string | undefined;
  turns?: number | undefined;
  /** Seconds per phase (`claim`, `agent`, `eval`, `exec`) and the command count (`exec_calls`). */
  timings: Record<string, number>;
}

const AGENT_DONE = /\[agent\] (\S+): reward=(-?[\d.]+(?:e-?\d+)?)(.*)$/;
const AGENT_ABORT = /\[agent\] (\S+) aborted: (.*)$/;

function agentLine(line: string, step: number): AgentLine | undefined {
  const done = AGENT_DONE.exec(line);
  // A reward that is not a finite number (`1e999`, `1.2.3`) is not a rollout line: counted as ignored.
  if (done && !Number.isFinite(Number(done[2]))) return undefined;
  if (done) {
    const out: AgentLine = {
      task: done[1]!,
      step,
      status: 'completed',
      reward: Number(done[2]),
      timings: {},
    };
    for (const [, key, value, unit, calls] of done[3]!.matchAll(
      /(\w+)=([^\s(]+?)(s?)(?:\(n=(\d+)\))?(?=\s|$)/g,
    )) {
      if (key === 'exit') out.exit = value!;
      else if (key === 'turns' && Number.isFinite(Number(value))) out.turns = Number(value);
      else if (unit === 's' && Number.isFinite(Number(value))) out.timings[key!] = Number(value);
      if (calls !== undefined) out.timings[`${key}_calls`] = Number(calls);
    }
    return out;
  }
  const aborted = AGENT_ABORT.exec(line);
  if (aborted) return { task: aborted[1]!, step, status: 'aborted', cause: aborted[2]!.trim(), timings: {} };
  return undefined;
}

const PERF = /(?:^|[\s\]])perf (\d+): (\{.*?)\s*$/;
/** slime's per-optimizer-step line (`critic-step K:` is the critic's, not read). */
const TRAIN = /(?:^|\s)step (\d+): (\{.*?)\s*$/;
/** Keys of the perf line slime's trainer writes after a rollout's optimizer steps. */
const TRAIN_SIDE = ['perf/train_time', 'perf/actor_train_time', 'perf/train_wait_time', 'perf/step_time'];
const STAMP = /\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]/;
const METRICS = /\[metrics\] step=(\d+) (.*)$/;

const KNOWN: Array<[keyof PerfStep, string]> = [
  ['stepTime', 'perf/step_time'],
  ['rolloutTime', 'perf/rollout_time'],
  ['trainTime', 'perf/train_time'],
  ['trainWaitTime', 'perf/train_wait_time'],
  ['updateWeightsTime', 'perf/update_weights_time'],
  ['waitTimeRatio', 'perf/wait_time_ratio'],
];

/**
 * Parse a slime trainer log (`ray job logs` output, Ray actor prefixes allowed) into per-step timing.
 * Each step has two `perf N: {python dict}` lines (rollout side, train side); they are merged by
 * rollout id. Unreadable perf lines are counted as malformed; other lines are ignored. Never throws.
 */
export function parseSlimePerfLog(input: string | Iterable<string>): SlimePerfLog {
  const lines = typeof input === 'string' ? input.split('\n') : input;
  const steps = new Map<number, PerfStep>();
  const out: SlimePerfLog = {
    steps: [],
    lines: 0,
    ignored: 0,
    malformed: 0,
    malformedLines: [],
    rollouts: { completed: 0, aborted: 0 },
    agentLines: [],
    trainLines: 0,
    unattributedTrainLines: 0,
  };
  // A rollout's optimizer-step lines come before the train-side perf line that names the rollout.
  let pendingTrain: Array<Record<string, number>> = [];
  const step = (id: number) => {
    let s = steps.get(id);
    if (!s) {
      s = { rolloutId: id, metrics: {} };
      steps.set(id, s);
    }
    return s;
  };
  let last = '';
  let currentStep = 0;
  for (const raw of lines) {
    out.lines++;
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    last = line;
    const perfAt = line.indexOf('perf ');
    if (perfAt !== -1) {
      const m = PERF.exec(line);
      if (m) {
        let dict: PyValue;
        try {
          dict = parsePythonLiteral(m[2]!);
        } catch {
          dict = null;
        }
        if (dict === null || typeof dict !== 'object' || Array.isArray(dict)) {
          out.malformed++;
          if (out.malformedLines.length < 20) out.malformedLines.push(out.lines);
          continue;
        }
        const s = step(Number(m[1]));
        currentStep = s.rolloutId;
        Object.assign(s.metrics, dict);
        if (pendingTrain.length && TRAIN_SIDE.some((k) => k in dict)) {
          s.train = meanByKey(pendingTrain);
          s.trainSteps = pendingTrain.length;
          pendingTrain = [];
        }
        for (const [field, key] of KNOWN) {
          const v = dict[key];
          if (typeof v === 'number') (s as unknown as Record<string, number>)[field] = v;
        }
        const stamp = STAMP.exec(line);
        if (stamp) s.loggedAt = stamp[1]!;
        continue;
      }
    }
    if (line.includes("'train/")) {
      const m = TRAIN.exec(line);
      const dict = m ? readDict(m[2]!) : undefined;
      if (dict && Object.keys(dict).some((k) => k.startsWith('train/'))) {
        out.trainLines++;
        pendingTrain.push(
          Object.fromEntries(
            Object.entries(dict).filter(
              (e): e is [string, number] => typeof e[1] === 'number' && Number.isFinite(e[1]),
            ),
          ),
        );
        continue;
      }
      if (m) {
        out.malformed++;
        if (out.malformedLines.length < 20) out.malformedLines.push(out.lines);
        continue;
      }
    }
    if (line.includes('[metrics] step=')) {
      const m = METRICS.exec(line);
      if (m) {
        const s = step(Number(m[1]));
        currentStep = s.rolloutId;
        s.agent ??= {};
        for (const pair of m[2]!.trim().split(/\s+/)) {
          const eq = pair.indexOf('=');
          const v = Number(pair.slice(eq + 1));
          if (eq > 0 && !Number.isNaN(v)) s.agent[pair.slice(0, eq)] = v;
        }
        continue;
      }
    }
    if (line.includes('[agent] ')) {
      const a = agentLine(line, currentStep);
      if (a) {
        out.agentLines.push(a);
        out.rollouts[a.status]++;
        continue;
      }
    }
    out.ignored++;
  }
  // A trailing newline is not a line.
  if (typeof input === 'string' && last === '' && out.lines > 0) {
    out.lines--;
    out.ignored--;
  }
  out.steps = [...steps.values()].sort((a, b) => a.rolloutId - b.rolloutId);
  out.unattributedTrainLines = pendingTrain.length;
  return out;
}

/** A Python dict literal, or undefined when the text is not one. */
function readDict(text: string): Record<string, PyValue> | undefined {
  try {
    const v = parsePythonLiteral(text);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Each key's mean over the records that have it. */
function meanByKey(records: ReadonlyArray<Record<string, number>>): Record<string, number> {
  const sums = new Map<string, [number, number]>();
  for (const r of records)
    for (const [k, v] of Object.entries(r)) {
      const [sum, n] = sums.get(k) ?? [0, 0];
      sums.set(k, [sum + v, n + 1]);
    }
  return Object.fromEntries([...sums].map(([k, [sum, n]]) => [k, sum / n]));
}

const PHASE_OF: Record<string, 'claim' | 'agent' | 'eval' | 'exec'> = {
  claim: 'claim',
  agent: 'agent',
  eval: 'eval',
  exec: 'exec',
};

/**
 * The `[agent]` lines as rollout results, by step, for the report's per-rollout sections (reward
 * histogram, tasks, failures, phase timing). They carry no training rows; an aborted line has no reward.
 */
export function agentResults(
  log: Pick<SlimePerfLog, 'agentLines'>,
): Array<{ step: number; results: RolloutResult[] }> {
  const bySteps = new Map<number, RolloutResult[]>();
  log.agentLines.forEach((a, i) => {
    const timings: RolloutResult['timings'] = {};
    for (const [key, sec] of Object.entries(a.timings)) {
      const phase = PHASE_OF[key];
      if (phase) timings[phase] = sec * 1000;
    }
    const base = {
      taskId: a.task,
      groupIndex: 0,
      sampleIndex: 0,
      rolloutId: i,
      samples: [],
      turns: a.turns ?? 0,
      timings,
      metadata: a.exit === undefined ? {} : { exit: a.exit },
    };
    const result: RolloutResult =
      a.status === 'completed'
        ? { ...base, status: 'completed', reward: a.reward! }
        : { ...base, status: 'aborted', error: { code: a.cause ?? 'aborted', message: a.cause ?? '' } };
    bySteps.set(a.step, [...(bySteps.get(a.step) ?? []), result]);
  });
  return [...bySteps.entries()].sort(([a], [b]) => a - b).map(([step, results]) => ({ step, results }));
}
