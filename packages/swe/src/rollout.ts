/**
 * One SWE rollout, whatever the agent: claim a sandbox of the task's repo image, establish the buggy state
 * (history hidden), run the agent through the capture proxy, capture its change as a patch, release its
 * sandbox, grade the patch in a fresh sandbox of the same image, and finish the capture session into
 * slime-wire samples. Infrastructure failures throw, so the runner reports them as `failed` (never reward
 * 0); what the agent's patch causes is graded, and a hack scores 0 (counted by kind in the metadata).
 */
import { randomUUID } from 'node:crypto';
import { GradingError, type TaskSpec } from '@vime/core';
import type { Sampling } from '@vime/core/engine';
import type { CaptureProxy, CaptureSession } from '@vime/core/proxy';
import type { RolloutContext, RolloutFunction, RolloutOutcome } from '@vime/core/runner';
import type { ExecResult, Sandbox, SandboxSpec } from '@vime/sandbox';
import type { HackPolicy } from './antihack.js';
import { captureAgentPatch } from './capture.js';
import { gradeInFreshSandbox } from './grade-in-sandbox.js';
import type { SweGradeResult } from './grade-types.js';
import type { SwePools } from './pools.js';
import { type SweSession, setupSweTask } from './setup.js';

/**
 * What `sweRollout` runs in the task's sandbox: an agent that works on the repository through the capture
 * proxy, whose model calls are the rollout's training turns. `harnessAgent` of `@vime/harness` makes one
 * for its mini-swe-agent and for each pinned CLI harness; a user's own agent implements this.
 */
export interface SweAgent {
  /** The agent's name on the rows (`metadata.agent`), e.g. `mini-swe-agent` or `claude-code`. */
  readonly kind: string;
  /**
   * The sandbox the agent works in. Absent: a warm one claimed from the task's pool. Present: one created
   * with these spec fields (a CLI harness needs the proxy channel and its binary bound in).
   */
  sandboxSpec?: ((proxy: CaptureProxy, signal: AbortSignal) => Promise<Partial<SandboxSpec>>) | undefined;
  /** Run the agent on the task in its sandbox. */
  run(input: SweAgentInput): Promise<SweAgentRun>;
}

/** What an agent gets: the task, its sandbox and a timed `exec`, the proxy and its session, and a signal. */
export interface SweAgentInput {
  task: TaskSpec;
  /** The agent's sandbox, in the task's buggy state. */
  sandbox: Sandbox;
  /** `sandbox.exec` with the rollout's command timeout, timed and reported as `rollout:exec` events. */
  exec: (command: string) => Promise<ExecResult>;
  proxy: CaptureProxy;
  /** The rollout's open capture session: its `apiKey` is the agent's API key. */
  session: CaptureSession;
  signal: AbortSignal;
}

/** How an agent's run ended, and what it did. */
export interface SweAgentRun {
  /** How the agent ended, in mini-swe-agent's words (`Submitted`, `LimitsExceeded`, …). */
  exitStatus: string;
  /** It ran out of its budget (turns or time): the rollout is `truncated`, still graded. */
  truncated: boolean;
  /** Model calls made. */
  turns: number;
  /** The commands it ran, scanned by the grader's anti-hack checks. */
  transcript: string[];
  /** Extra fields for the rows' metadata (e.g. `format_errors`, `harness`). */
  metadata?: Record<string, unknown> | undefined;
}

/** Options of `sweRollout`. */
export interface SweRolloutOptions {
  pools: SwePools;
  proxy: CaptureProxy;
  /** The agent of every task, or the agent of each task (e.g. by its `metadata.agent`). */
  agent: SweAgent | ((task: TaskSpec) => SweAgent);
  /** Sampling of every turn of the session (what the agent asks for is overridden). */
  sampling?: Sampling | undefined;
  /** The session's context budget in tokens. */
  maxContextTokens?: number | undefined;
  /** Timeout of one agent command in the sandbox (default 60 s). */
  execTimeoutMs?: number | undefined;
  /** Test run timeout of the grade (default 900 s). */
  gradeTimeoutMs?: number | undefined;
  /** What a detected hack does (default `zero`). */
  onSuspicious?: HackPolicy | undefined;
  /** Called as a sandbox claim starts (after the circuit breaker let the rollout through). */
  onClaim?: (() => void) | undefined;
}

/** The rollout function of SWE tasks: one call is one rollout of one task. */
export function sweRollout(options: SweRolloutOptions): RolloutFunction<TaskSpec> {
  const agentOf = typeof options.agent === 'function' ? options.agent : () => options.agent as SweAgent;
  return (task, ctx) => new SweRollout(options, agentOf(task), task, ctx).run();
}

/** One rollout's state: what it opened, so a failure anywhere closes exactly that. */
class SweRollout {
  readonly #sessionId: string;
  #sandbox: Sandbox | undefined;
  #opened = false;
  #finished = false;
  #released = false;
  #modelMs = 0;
  #execMs = 0;
  readonly #execCallsMs: number[] = [];

  constructor(
    private readonly options: SweRolloutOptions,
    private readonly agent: SweAgent,
    private readonly task: TaskSpec,
    private readonly ctx: RolloutContext,
  ) {
    this.#sessionId = `r${ctx.rolloutId}-${randomUUID()}`;
  }

  async run(): Promise<RolloutOutcome> {
    const { proxy } = this.options;
    const onTurn = (e: { sessionId: string; durationMs: number }) => {
      if (e.sessionId === this.#sessionId) this.#modelMs += e.durationMs;
    };
    proxy.events.on('turn', onTurn);
    try {
      this.#sandbox = await this.ctx.phase('claim', () => this.#claim());
      return await this.#work(this.#sandbox);
    } finally {
      proxy.events.off('turn', onTurn);
      // The capture session of a rollout that failed is closed; its turns are not training rows.
      if (this.#opened && !this.#finished) proxy.finishSession(this.#sessionId, { status: 'failed' });
      if (this.#sandbox && !this.#released) await this.options.pools.release(this.#sandbox);
    }
  }

  /** The circuit breaker: while no engine is healthy, no sandbox is claimed (the rollout waits here). */
  async #claim(): Promise<Sandbox> {
    const { proxy, pools, onClaim } = this.options;
    const { signal } = this.ctx;
    const spec = await this.agent.sandboxSpec?.(proxy, signal);
    await proxy.router.whenAvailable({ signal });
    onClaim?.();
    return spec ? pools.create(this.task, spec, { signal }) : pools.claim(this.task, { signal });
  }

  async #work(sandbox: Sandbox): Promise<RolloutOutcome> {
    const { proxy, sampling, maxContextTokens } = this.options;
    const { ctx, task } = this;
    const swe = await ctx.phase('setup', () => setupSweTask(sandbox, task, { signal: ctx.signal }));
    const session = proxy.openSession(this.#sessionId, { sampling, maxContextTokens });
    this.#opened = true;
    const agentRun = await ctx.phase('agent', () =>
      this.agent.run({ task, sandbox, exec: (c) => this.#exec(c), proxy, session, signal: ctx.signal }),
    );
    const graded = await this.#grade(swe, sandbox, agentRun.transcript);
    const status = agentRun.truncated ? 'truncated' : 'completed';
    const metadata = {
      instance_id: task.id,
      agent: this.agent.kind,
      exit_status: agentRun.exitStatus,
      ...agentRun.metadata,
      resolution: graded.resolution,
      grade_outcome: graded.outcome,
      hacks: graded.hacks,
      hack_flags: graded.flags.map((f) => f.kind),
    };
    const samples = proxy.finishSession(this.#sessionId, {
      reward: graded.reward,
      status,
      baseSample: { label: task.id, metadata },
    });
    this.#finished = true;
    // Per-command durations stay on the result (for exec percentiles), not on the training rows.
    return {
      reward: graded.reward,
      status,
      samples,
      sessionId: this.#sessionId,
      turns: agentRun.turns,
      timings: { model: this.#modelMs, exec: this.#execMs },
      metadata: { ...metadata, execCallsMs: this.#execCallsMs },
    };
  }

  async #exec(command: string): Promise<ExecResult> {
    const { signal } = this.ctx;
    const timeoutMs = this.options.execTimeoutMs ?? 60_000;
    const r = await this.#sandbox!.exec(command, { timeoutMs, signal });
    this.#execMs += r.durationMs;
    this.#execCallsMs.push(r.durationMs);
    this.ctx.emit({ type: 'rollout:exec', command, exitCode: r.exitCode, durationMs: r.durationMs });
    return r;
  }

  /**
   * Capture the agent's change as a patch, release its sandbox (nothing of it but the patch reaches
   * grading), grade in a fresh sandbox with the anti-hack checks; a grading infrastructure failure throws.
   */
  async #grade(
    swe: SweSession,
    sandbox: Sandbox,
    transcript: string[],
  ): Promise<Extract<SweGradeResult, { status: 'graded' }>> {
    const { pools, gradeTimeoutMs, onSuspicious } = this.options;
    const { ctx, task } = this;
    const evalStart = performance.now();
    const graded = await ctx.phase('eval', async () => {
      const captured = await captureAgentPatch(swe, { signal: ctx.signal });
      await pools.release(sandbox);
      this.#released = true;
      return gradeInFreshSandbox(pools, task, captured, {
        transcript,
        timeoutMs: gradeTimeoutMs,
        onSuspicious,
        signal: ctx.signal,
      });
    });
    ctx.emit({
      type: 'rollout:eval',
      durationMs: performance.now() - evalStart,
      ...(graded.status === 'graded' ? { reward: graded.reward } : {}),
      detail:
        graded.status === 'graded'
          ? {
              status: graded.status,
              outcome: graded.outcome,
              resolution: graded.resolution,
              hacks: graded.hacks,
            }
          : { status: graded.status, reason: graded.reason },
    });
    if (graded.status === 'infra_error') {
      throw new GradingError(`grading ${task.id} failed (${graded.reason}): ${graded.message}`, {
        data: { reason: graded.reason },
      });
    }
    return graded;
  }
}
