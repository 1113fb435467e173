/**
 * One run of the loop: what it started (engines, proxy, pools, queue, sinks) and the step machinery. The
 * producer rolls a step's groups out; the consumer hands complete steps off one at a time, in step order.
 */
import { appendFile, mkdir, readFile, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import {
  decodeSamples,
  encodeSamples,
  isScored,
  type RolloutResult,
  type Sample,
  type TaskSpec,
} from '@vime/core';
import { loadTokenizer } from '@vime/core/engine';
import type { CaptureProxy } from '@vime/core/proxy';
import { type GradeEntry, GroupQueue, type GroupsOutcome, runGroups, scoredOf } from '@vime/core/queue';
import { type RolloutFunction, rolloutProgressBar } from '@vime/core/runner';
import { writeFileAtomic } from '@vime/core/utils';
import { auditHandoff } from '@vime/grpo';
import {
  rolloutMetrics,
  specDecodeScalars,
  stepSpecDecode,
  stepToolCallHealth,
  weightStaleness,
} from '@vime/metrics';
import { type MetricSink, rolloutRecordOf, stepRecordOf } from '@vime/metrics/sinks';
import { reapOrphans, type SandboxEmitter } from '@vime/sandbox';
import type { RowVerdict, SwePools } from '@vime/swe';
import { checkAgents, harnessSocket, loopRollout, usesHarness } from './agents.js';
import { RUN_CONFIG_FILE, renderRunConfig } from './config/render.js';
import type { Config } from './config/schema.js';
import { bundledTokenizerDir, defaultRunFolder } from './defaults.js';
import { type RunEngines, startEngines, startRunProxy } from './engines.js';
import { createStepGroups, doneSiblings, taskDraw } from './groups.js';
import type { LoopIO, RunSummary } from './loop.js';
import { sampleEngines, writeRunReport } from './report.js';
import { RouterLog } from './router-log.js';
import { openRunSinks } from './sinks.js';
import { SpecCounters } from './spec-counters.js';
import {
  auditScalars,
  correct,
  finishedStep,
  type StepSummary,
  specDecodeLines,
  stampAdvantages,
  stepBatchPath,
  stepLine,
  stepResultsPath,
  toolCallLines,
  toolCallScalars,
  trainScalars,
  withoutRows,
  workUnitCounts,
  zeroVarianceGroups,
} from './steps.js';
import { loadRunTasks, readTasks } from './tasks.js';
import { TurnLog } from './turn-log.js';

/** What a run starts before its folder exists; stopped together when the start fails. */
interface Services {
  dataset: string;
  tasks: TaskSpec[];
  excluded: RowVerdict[];
  pools: SwePools;
  sandboxEvents: SandboxEmitter;
  engines: RunEngines;
  proxy: CaptureProxy;
  socket: { socketPath: string | undefined; close: () => Promise<void> };
}

/**
 * Everything that can fail on bad input comes before the run folder is made: a failed start leaves none.
 * The engines (and their tokenizer check) come before any sandbox: a wrong engine stops the run before
 * the baseline check or a rollout claims one.
 */
async function startServices(config: Config, io: LoopIO, labels: Record<string, string>): Promise<Services> {
  // The dataset first: its problems are the most common bad input, and reading it costs least.
  const read = await readTasks(config, { log: io.log });
  const tokenizer = await loadTokenizer(config.tokenizer ?? bundledTokenizerDir());
  let engines: RunEngines | undefined;
  let pools: SwePools | undefined;
  let socket: Services['socket'] = { socketPath: undefined, close: async () => {} };
  try {
    // Claude Code and Codex reach the proxy only through its unix socket, bound into their sandboxes; an
    // agent of the caller's own runs in this process and needs none.
    socket = await harnessSocket(!io.agent && usesHarness(checkAgents(read.tasks, config)));
    const policy = io.agent?.standInPolicy?.(read.tasks);
    const started = await startEngines(config, read.tasks, tokenizer, io.log, io.signal, policy);
    engines = started;
    const loaded = await loadRunTasks(config, { labels, log: io.log, signal: io.signal, read });
    pools = loaded.pools;
    const proxy = await startRunProxy(config, started, tokenizer, socket.socketPath);
    const { dataset, tasks, excluded, sandboxEvents } = loaded;
    return { dataset, tasks, excluded, pools: loaded.pools, sandboxEvents, engines: started, proxy, socket };
  } catch (error) {
    await pools?.close();
    await engines?.close();
    await socket.close();
    throw error;
  }
}

export class LoopRun {
  readonly steps: StepSummary[] = [];
  readonly #results: RolloutResult[] = [];
  readonly #resultsByStep = new Map<number, RolloutResult[]>();
  readonly #trainedRows: Sample[] = [];
  readonly #stepGroups = new Map<number, GroupsOutcome>();
  readonly #claims: Array<{ warm: boolean; latencyMs: number }> = [];
  readonly #startedAt = Date.now();
  readonly #started = performance.now();
  readonly #sampler: ReturnType<typeof sampleEngines>;
  readonly #routerLog: RouterLog;
  readonly #rollout: RolloutFunction<TaskSpec>;
  /** vLLM engines' speculative-decoding counters, read at every hand-off (their answers carry no count). */
  readonly #specCounters: SpecCounters | undefined;
  #resumedRollouts = 0;
  #outputTokens = 0;
  #ledgerFailed = false;
  #engineSamples: Awaited<ReturnType<ReturnType<typeof sampleEngines>['stop']>> = [];
  #units: GroupQueue['stats'] | undefined;
  /** The task of each prompt group (dataset order, or the fresh draw without replacement). */
  readonly #taskOf: (groupIndex: number) => number;

  private constructor(
    readonly config: Config,
    readonly io: LoopIO,
    readonly out: string,
    readonly runId: string,
    readonly reaped: number,
    readonly services: Services,
    readonly queue: GroupQueue,
    readonly sinks: MetricSink,
    readonly turnLog: TurnLog,
  ) {
    this.#routerLog = new RouterLog(services.proxy, io.log);
    this.#taskOf = drawOf(config, services.tasks.length);
    this.#rollout = loopRollout({
      config,
      proxy: services.proxy,
      pools: services.pools,
      model: 'vime-policy',
      onClaim: () => this.#routerLog.claimsStarted++,
      agent: io.agent?.agent,
    });
    services.sandboxEvents.on('claim', this.#onClaim);
    services.proxy.events.on('turn', (e) => {
      this.#outputTokens += e.outputTokens;
      turnLog.record(e.trajectoryId, e.turn);
    });
    // The engines start on the trainer's current version (each hand-off's trainer notes the next): an
    // engine that names no version with its tokens (vLLM) gets it from this log, and the hand-off checks
    // every captured version against it (SGLang's own, as each engine reported it).
    this.#noteVersion(String(queue.trainerVersion));
    turnLog.weightLog = services.proxy.router.weightLog;
    this.#sampler = sampleEngines(services.engines.urls);
    const vllm = config.engineKind === 'vllm' && services.engines.standIns.length === 0;
    this.#specCounters = vllm ? new SpecCounters(services.engines.urls) : undefined;
  }

  static async start(config: Config, io: LoopIO): Promise<LoopRun> {
    const out = resolve(config.out ?? defaultRunFolder());
    const runId = `ca-${Date.now().toString(36)}`;
    // A resumed run first removes what the killed one left behind (sandboxes whose creator is dead).
    const reaped = config.resume
      ? (await reapOrphans({ olderThanMs: 0, ...(config.sandbox === 'docker' ? {} : { docker: false }) }))
          .removed.length
      : 0;
    const services = await startServices(config, io, { 'vime.run': runId });
    const { proxy, pools, engines, socket, dataset, tasks } = services;
    /** A start that fails before the first rollout stops everything it started; a fresh run leaves no folder. */
    const abandon = async (error: unknown, queue?: GroupQueue): Promise<never> => {
      await queue?.close();
      await Promise.all([proxy.close(), pools.close(), engines.close()]);
      await socket.close();
      if (!config.resume) await rm(out, { recursive: true, force: true });
      throw error;
    };
    let queue: GroupQueue;
    try {
      // A fresh draw that cannot fit the run is refused before anything is written.
      drawOf(config, tasks.length);
      await mkdir(join(out, 'steps'), { recursive: true });
      await writeFileAtomic(join(out, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
      // The resolved config as a user reads it, each value with its source; a resume keeps the first.
      if (!config.resume)
        await writeFileAtomic(join(out, RUN_CONFIG_FILE), renderRunConfig(config, io.sources ?? {}));
      queue = await GroupQueue.open(join(out, 'queue'), {
        maxAttempts: config.siblingAttempts,
        deadlineMs: config.rolloutGuardMs + 60_000,
        maxStaleness: config.maxStaleness ?? undefined,
      });
    } catch (error) {
      return abandon(error);
    }
    io.log(
      `dataset: ${dataset} (${tasks.length} tasks); sandboxes: ${config.sandbox}, pools: ${poolList(pools.names)}`,
    );
    try {
      // Sandboxes that cannot be made end the start here, with the cause (`ready` gives up on them).
      await pools.ready(io.signal ? { signal: io.signal } : {});
    } catch (error) {
      return abandon(error, queue);
    }
    const engine =
      engines.standIns.length > 0 ? 'stand-in engine (scripted policy), not a model' : config.engineKind;
    const sinks = await openRunSinks(out, { runId, startedAt: Date.now(), config, engine }, io.log, {
      wandbProject: config.wandbProject,
      tensorboard: config.tensorboard,
    });
    const turnLog = await TurnLog.open(out, Boolean(config.resume), io.log);
    return new LoopRun(config, io, out, runId, reaped, services, queue, sinks, turnLog);
  }

  // Every claim of the run (agent and grading sandboxes), warm or created on demand.
  #onClaim = (e: { warm: boolean; latencyMs: number }) =>
    this.#claims.push({ warm: e.warm, latencyMs: e.latencyMs });

  /** Every step: rolled out (or found handed off before a restart), then handed off in step order. */
  async runSteps(): Promise<void> {
    const { config, io } = this;
    // Hand-offs run one at a time, in step order (one consumer).
    let consumer: Promise<unknown> = Promise.resolve();
    const handoffs: Array<Promise<StepSummary>> = [];
    for (let step = 1; step <= config.steps; step++) {
      io.signal?.throwIfAborted();
      const done = await this.#resumeStep(step);
      if (done) {
        handoffs.push(Promise.resolve(done));
        continue;
      }
      const stepStart = performance.now();
      const before = this.#resumedRollouts;
      await this.#rollOut(step, (step - 1) * config.promptsPerStep);
      // Every sibling of the step was in the queue before this start: nothing ran now.
      const endedBefore = this.#resumedRollouts - before === config.promptsPerStep * config.samplesPerPrompt;
      const rolloutSeconds = (performance.now() - stepStart) / 1000;
      const handoff = consumer
        .then(() => this.#handOff(step))
        .then((s) => this.#recordStep({ ...s, rolloutSeconds, ...(endedBefore ? { resumed: true } : {}) }));
      consumer = handoff.catch(() => undefined);
      handoffs.push(handoff);
      if (config.mode === 'sync') await handoff;
    }
    this.steps.push(...(await Promise.all(handoffs)));
  }

  /** A step handed off before a restart: its rows are in its batch file; only its results are needed. */
  async #resumeStep(step: number): Promise<StepSummary | undefined> {
    const { queue } = this;
    const done = await finishedStep(this.out, step, this.config.samplesPerPrompt);
    if (!done) return undefined;
    // Completes a commit the restart cut off.
    if (queue.trainerStep < step) await queue.commit(step, { version: queue.trainerVersion });
    this.#results.push(...done.results);
    const rows = decodeSamples(await readFile(done.summary.batchPath));
    this.#trainedRows.push(...rows);
    // Its rows were audited when it was handed off: their turns are not needed again.
    this.turnLog.forget(rows.flatMap((r) => (r.session_id === null ? [] : [r.session_id])));
    this.#resultsByStep.set(step, done.results);
    this.#resumedRollouts += done.results.filter(isScored).length;
    return done.summary;
  }

  /**
   * The producer: makes a step's prompt groups (found again after a restart), runs their open siblings
   * (each graded one is recorded with a receipt as it finishes) until every group is complete or dropped.
   */
  async #rollOut(step: number, first: number): Promise<void> {
    const { config, queue, io } = this;
    const ids = await createStepGroups(
      queue,
      step,
      first,
      config.promptsPerStep,
      this.services.tasks.length,
      config.samplesPerPrompt,
      this.#taskOf,
    );
    await this.#recordDraw(step, first);
    this.#resumedRollouts += doneSiblings(queue, ids);
    let bar: { stop(): void } | undefined;
    const groups = await runGroups(queue, ids, this.services.tasks, this.#rollout, {
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
        this.#routerLog.rolloutsFinished++;
        void this.sinks.rollout(rolloutRecordOf(step, result));
      },
      onGraded: (g) => this.#ledger(step, g),
    });
    bar?.stop();
    this.#stepGroups.set(step, groups);
  }

  /** The step's tasks, in group order, so a reader can check the draw (`draws/<step>.json`). */
  async #recordDraw(step: number, first: number): Promise<void> {
    const { config } = this;
    const groups = Array.from({ length: config.promptsPerStep }, (_, i) => first + i);
    const record = {
      step,
      draw: config.taskDraw,
      seed: config.taskDraw === 'fresh' ? config.taskDrawSeed : null,
      instanceIds: groups.map((g) => this.services.tasks[this.#taskOf(g)]!.id),
    };
    await mkdir(join(this.out, 'draws'), { recursive: true });
    await writeFileAtomic(join(this.out, 'draws', `${step}.json`), `${JSON.stringify(record)}\n`);
  }

  /**
   * On record before its receipt: a restart shows every reward that was computed again. Like the metrics,
   * a ledger that cannot be written (a full disk) is reported once and costs no rollout.
   */
  #ledger(step: number, g: GradeEntry) {
    const line = {
      t: Date.now(),
      step,
      group: g.group,
      slot: g.slot,
      attempt: g.attempt,
      rollout_id: g.rolloutId,
      status: g.status,
      reward: g.reward,
    };
    return appendFile(join(this.out, 'grades.jsonl'), `${JSON.stringify(line)}\n`).catch((error: unknown) => {
      if (this.#ledgerFailed) return;
      this.#ledgerFailed = true;
      this.io.log(`grades.jsonl: cannot append (${(error as Error).message}); the run goes on without it`);
    });
  }

  /** The consumer: hands a step's rows to training (here: the step's batch file), then commits the step. */
  async #handOff(step: number): Promise<StepSummary> {
    const { queue, io } = this;
    const t0 = performance.now();
    const { complete, unhanded } = this.#stepGroups.get(step)!;
    const taken = scoredOf(await queue.take(step, { groups: complete, signal: io.signal }));
    const { handed, failed, audit } = this.#audit(step, taken, unhanded);
    const scored = handed.map((h) => h.rollout);
    const results: RolloutResult[] = [...scored, ...failed, ...unhanded];
    const shuffleSeed = this.config.shuffleRewardsSeed;
    const { rows, nonZero } = stampAdvantages(
      scored,
      shuffleSeed === null ? undefined : { seed: shuffleSeed, step },
    );
    // Every row says which weight versions its tokens came from and how stale it was when trained on.
    for (const h of handed)
      for (const row of h.rollout.samples) row.metadata = { ...row.metadata, staleness: h.staleness };
    this.#trainedRows.push(...rows);
    const batchPath = stepBatchPath(this.out, step);
    // Atomic: a resume rewrites a step that was handed off but not committed, and a kill mid-write must
    // leave the whole earlier file, never an empty one (a trainer may be reading it).
    await writeFileAtomic(batchPath, encodeSamples(rows));
    // Trained before the step is recorded as handed off: a run killed mid-training trains it again.
    const train = io.trainer ? await io.trainer({ step, batchPath }, io.signal) : undefined;
    // The engines serve the trainer's version from now on: tokens of engines that name none (vLLM) carry it.
    if (train?.weightVersion) this.#noteVersion(train.weightVersion);
    await writeFileAtomic(stepResultsPath(this.out, step), `${JSON.stringify(results.map(withoutRows))}\n`);
    // The version the engines serve after this step (the trainer's, when it numbers it); staleness of
    // later samples is measured against it.
    const published =
      train && /^\d{1,15}$/.test(train.weightVersion) ? Number(train.weightVersion) : queue.trainerVersion;
    await queue.commit(step, { version: published });
    this.#results.push(...results);
    this.#resultsByStep.set(step, results);
    // Read every hand-off, so each step's counter window starts where the last one ended.
    const engineSpec = await this.#specCounters?.step();
    return {
      zeroVarianceGroups: zeroVarianceGroups(results),
      step,
      rollouts: results.length,
      metrics: rolloutMetrics(results, { correct, groupSize: this.config.samplesPerPrompt }),
      advantages: { nonZero, rows: rows.length },
      rolloutSeconds: 0,
      handoffSeconds: (performance.now() - t0) / 1000,
      batchPath,
      train,
      audit,
      toolCalls: stepToolCallHealth(results),
      spec: stepSpecDecode(results) ?? engineSpec,
    };
  }

  /** Log `version` for the engines whose answers name none (vLLM's); SGLang's report their own. */
  #noteVersion(version: string): void {
    const { router } = this.services.proxy;
    const urls = router.status().flatMap((e) => (e.kind === 'vllm' ? [e.url] : []));
    if (urls.length > 0) router.noteWeightUpdate(version, { urls });
  }

  /**
   * The token audit of the step's rows against the turns the proxy captured for their sessions: a rollout
   * that differs is an infrastructure failure (its cause counted), never trained. The sessions are then
   * forgotten, whatever the verdict.
   */
  #audit(step: number, taken: ReturnType<typeof scoredOf>, unhanded: RolloutResult[]) {
    const t0 = performance.now();
    const { passed, failed, audit } = auditHandoff(
      taken.map((h) => h.rollout),
      this.turnLog.turnsOf,
      { weightLog: this.turnLog.weightLog },
    );
    const seconds = (performance.now() - t0) / 1000;
    for (const f of failed.slice(0, 5)) this.io.log(`step ${step}: token audit: ${f.failure.error.message}`);
    if (failed.length > 5) this.io.log(`step ${step}: token audit: … and ${failed.length - 5} more rollouts`);
    const sessions = [...taken.map((h) => h.rollout), ...unhanded].flatMap((r) => [
      ...(r.sessionId === undefined ? [] : [r.sessionId]),
      ...r.samples.flatMap((row) => (row.session_id === null ? [] : [row.session_id])),
    ]);
    this.turnLog.forget(sessions);
    const kept = new Set(passed);
    return {
      handed: taken.filter((h) => kept.has(h.rollout)),
      failed: failed.map((f) => f.failure),
      audit: { ...audit, seconds },
    };
  }

  async #recordStep(s: StepSummary): Promise<StepSummary> {
    await this.sinks.step(
      stepRecordOf(s.step, s.metrics, {
        'perf/rollout_time': s.rolloutSeconds,
        'perf/handoff_time': s.handoffSeconds,
        'rollout/zero_variance_groups': s.zeroVarianceGroups,
        ...auditScalars(s.audit),
        ...trainScalars(s.train),
        ...toolCallScalars(s.toolCalls),
        ...specDecodeScalars(s.spec),
      }),
    );
    this.io.log(stepLine(s));
    // The counts, and an alarm line when the model's tool calls stop parsing (rollouts then end as 0).
    for (const line of toolCallLines(s)) this.io.log(line);
    for (const line of specDecodeLines(s)) this.io.log(line);
    return s;
  }

  /** Stops everything the run started, in an order that loses nothing (the queue last but the engines). */
  async close(): Promise<void> {
    const { proxy, pools, socket, engines, sandboxEvents } = this.services;
    this.#engineSamples = await this.#sampler.stop();
    sandboxEvents.off('claim', this.#onClaim);
    await this.sinks.close();
    await pools.close();
    await proxy.close();
    await this.turnLog.close();
    await socket.close();
    this.#units = this.queue.stats;
    await this.queue.close();
    await engines.close();
  }

  /** The run's report (`report.json`, `report.html`) and its summary. */
  async summarize(): Promise<RunSummary> {
    const { config, services, steps } = this;
    const log = this.#routerLog;
    const overall = rolloutMetrics(this.#results, { correct, groupSize: config.samplesPerPrompt });
    const staleness = weightStaleness(this.#trainedRows);
    const standIn = services.engines.standIns.length > 0;
    const report = await writeRunReport({
      out: this.out,
      runId: this.runId,
      startedAt: this.#startedAt,
      config,
      sources: this.io.sources ?? {},
      standIn,
      engineCount: services.engines.engines.length,
      engineLogs: services.engines.logs,
      engineSamples: this.#engineSamples,
      steps: steps.map((s) => ({
        step: s.step,
        results: this.#resultsByStep.get(s.step) ?? [],
        rolloutSeconds: s.rolloutSeconds,
        handoffSeconds: s.handoffSeconds,
        audit: s.audit,
        resumed: s.resumed === true,
        train: s.train,
        spec: s.spec,
      })),
      claims: this.#claims,
      outputTokens: this.#outputTokens,
      rolloutSeconds: steps.reduce((t, s) => t + s.rolloutSeconds, 0),
      overall,
      workUnits: this.#units && workUnitCounts(this.#units),
      extra: {
        dataset: services.dataset,
        excluded: services.excluded,
        weight_staleness: staleness,
        router: {
          log: log.entries,
          engines: services.proxy.router.status(),
          session_moves: log.sessionMoves,
          turn_retries: log.turnRetries,
          turn_interruptions: log.turnInterruptions,
        },
      },
    });
    const { record } = report;
    return {
      out: this.out,
      dataset: services.dataset,
      excluded: services.excluded,
      gradeOutcomes: record.grade_outcomes ?? {},
      hacksByKind: record.hacks_by_kind ?? {},
      steps,
      overall,
      reportJson: report.json,
      reportHtml: report.html,
      engines: services.engines.urls,
      standIn,
      pool: services.pools.totals(),
      failuresByCause: record.failures_by_cause ?? {},
      reapedSandboxes: this.reaped,
      resumedRollouts: this.#resumedRollouts,
      // The same figures as report.json's `timing.execCall` (the rollouts' `metadata.execCallsMs`).
      execPerCall: { p50: overall.timing.execCall.p50, p99: overall.timing.execCall.p99 },
      tokensPerSecond: this.#outputTokens / ((performance.now() - this.#started) / 1000),
      router: log.entries,
      sessionMoves: log.sessionMoves,
      turnRetries: log.turnRetries,
      turnInterruptions: log.turnInterruptions,
      staleness,
    };
  }
}

/** Pool names for the start log: all of a few, the first ones and a count of many (one per repository). */
function poolList(names: readonly string[]): string {
  return names.length <= 6 ? names.join(', ') : `${names.length} (${names.slice(0, 3).join(', ')}, …)`;
}

const drawOf = (config: Config, taskCount: number) =>
  taskDraw(taskCount, {
    draw: config.taskDraw,
    seed: config.taskDrawSeed,
    steps: config.steps,
    promptsPerStep: config.promptsPerStep,
  });
