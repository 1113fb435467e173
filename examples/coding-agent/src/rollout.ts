/**
 * One coding-agent rollout: claim a sandbox of the task's repo image, establish the buggy state (history
 * hidden), run the agent through the capture proxy, capture its change as a patch, terminate its sandbox,
 * grade the patch in a fresh sandbox of the same image, and finish the capture session into slime-wire
 * samples. Infrastructure failures throw, so the runner reports them as `failed` (never reward 0); what the
 * agent's patch causes is graded, and a hack scores 0 (counted by kind in the metadata).
 */
import { randomUUID } from 'node:crypto';
import { EngineError, type TaskSpec } from '@vime/core';
import type { CaptureProxy } from '@vime/core/proxy';
import type { RolloutContext, RolloutOutcome } from '@vime/core/runner';
import { type SwePools, setupSweTask } from '@vime/swe';
import OpenAI from 'openai';
import { runAgent } from './agent.js';
import type { Config } from './config.js';
import { agentOfTask, gradeRollout, harnessRolloutOf } from './harness-rollout.js';

export interface RolloutDeps {
  config: Config;
  proxy: CaptureProxy;
  pools: SwePools;
  /** Model name sent to the engine through the proxy. */
  model: string;
  /** Called as a sandbox claim starts (after the circuit breaker let the rollout through). */
  onClaim?: () => void;
}

export function codingAgentRollout(deps: RolloutDeps) {
  const { config, proxy, pools, model, onClaim } = deps;
  const harnessRollout = harnessRolloutOf(deps);
  return async (task: TaskSpec, ctx: RolloutContext): Promise<RolloutOutcome> => {
    const agentKind = agentOfTask(task, config.agent);
    if (agentKind !== 'mini-swe-agent') return harnessRollout(agentKind, task, ctx);
    const { signal } = ctx;
    // claim/setup/agent/eval are timed by ctx.phase (a failure inside one is reported with that phase);
    // model and exec time are summed per call.
    // The circuit breaker: while no engine is healthy, no sandbox is claimed (the rollout waits here).
    const sandbox = await ctx.phase('claim', async () => {
      await proxy.router.whenAvailable({ signal });
      onClaim?.();
      return pools.claim(task, { signal });
    });
    const sessionId = `r${ctx.rolloutId}-${randomUUID().slice(0, 8)}`;
    let opened = false;
    let finished = false;
    let released = false;
    let modelMs = 0;
    const onTurn = (e: { sessionId: string; durationMs: number }) => {
      if (e.sessionId === sessionId) modelMs += e.durationMs;
    };
    proxy.events.on('turn', onTurn);
    try {
      const swe = await ctx.phase('setup', () => setupSweTask(sandbox, task, { signal }));
      const session = proxy.openSession(sessionId, {
        sampling: { temperature: config.temperature, topP: config.topP, maxTokens: config.maxTokensPerTurn },
        maxContextTokens: config.maxContextTokens,
      });
      opened = true;
      // A standard OpenAI client: the session's key is its API key, as any harness would send it.
      const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session.apiKey, maxRetries: 0 });
      const transcript: string[] = [];
      let execMs = 0;
      const execCallsMs: number[] = [];
      const agent = await ctx.phase('agent', () =>
        engineFailure(
          runAgent({
            client,
            model,
            task: task.prompt,
            stepLimit: config.maxTurns,
            signal,
            exec: async (command) => {
              transcript.push(command);
              const r = await sandbox.exec(command, { timeoutMs: config.execTimeoutMs, signal });
              execMs += r.durationMs;
              execCallsMs.push(r.durationMs);
              ctx.emit({ type: 'rollout:exec', command, exitCode: r.exitCode, durationMs: r.durationMs });
              return r;
            },
          }),
        ),
      );
      const graded = await gradeRollout(ctx, {
        pools,
        task,
        swe,
        sandbox,
        transcript,
        config,
        onReleased: () => {
          released = true;
        },
      });
      const status = agent.exitStatus === 'LimitsExceeded' ? 'truncated' : 'completed';
      const metadata = {
        instance_id: task.id,
        agent: agentKind,
        exit_status: agent.exitStatus,
        resolution: graded.resolution,
        grade_outcome: graded.outcome,
        format_errors: agent.formatErrors,
        hacks: graded.hacks,
        hack_flags: graded.flags.map((f) => f.kind),
      };
      const samples = proxy.finishSession(sessionId, {
        reward: graded.reward,
        status,
        baseSample: { label: task.id, metadata },
      });
      finished = true;
      const timings = { model: modelMs, exec: execMs };
      // Per-command durations stay on the result (for exec percentiles), not on the training rows.
      return {
        reward: graded.reward,
        status,
        samples,
        sessionId,
        turns: agent.steps,
        timings,
        metadata: { ...metadata, execCallsMs },
      };
    } finally {
      proxy.events.off('turn', onTurn);
      // Close the capture session of a rollout that failed; its turns are not training rows.
      if (opened && !finished) proxy.finishSession(sessionId, { status: 'failed' });
      if (!released) await pools.release(sandbox);
    }
  };
}

/**
 * A 5xx from the proxy means the router could not absorb an engine failure (no healthy engine past its
 * deadline): an infrastructure failure with the proxy's cause, never something the agent did.
 */
async function engineFailure<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    if (error instanceof OpenAI.APIError && error.status !== undefined && error.status >= 500) {
      throw new EngineError(`the capture proxy answered ${error.status}: ${error.message}`, {
        cause: error,
        isRetryable: error.status === 503,
      });
    }
    throw error;
  }
}
