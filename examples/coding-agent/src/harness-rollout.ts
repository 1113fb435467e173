/**
 * A rollout whose agent is a real harness (Claude Code or Codex, picked per sample by `metadata.agent`):
 * install the pinned harness (once per run), create the task's sandbox with the proxy channel, establish
 * the buggy state, run the harness headless through the capture proxy within its time budget, then grade
 * its change in a fresh sandbox exactly as the example's own agent is graded (`gradeRollout`).
 *
 * Failure taxonomy: an install failure, a harness that never reached the proxy (a broken channel), or a
 * harness killed at its budget while its request waited on the engine (a stalled engine) is an
 * infrastructure failure (thrown, never reward 0). A harness that gives up, exits with an error of its own
 * or runs out of time between model turns is an ordinary graded outcome.
 */
import { randomUUID } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, GradingError, type TaskSpec } from '@vime/core';
import type { CaptureProxy } from '@vime/core/proxy';
import type { RolloutContext, RolloutOutcome } from '@vime/core/runner';
import {
  type AgentKind,
  agentOf,
  HarnessError,
  type HarnessKind,
  type HarnessRun,
  harnessSandboxSpec,
  type InstalledHarness,
  installHarness,
  runHarness,
} from '@vime/harness';
import type { Sandbox } from '@vime/sandbox';
import {
  captureAgentPatch,
  gradeInFreshSandbox,
  type SweGradeResult,
  type SwePools,
  type SweSession,
  setupSweTask,
} from '@vime/swe';
import type { Config } from './config.js';

/** The sample's agent: its row's `agent` (`metadata.agent`), else the run's `--agent`. */
export function agentOfTask(task: TaskSpec, fallback: AgentKind): AgentKind {
  return task.metadata.agent == null ? fallback : agentOf(task.metadata);
}

/**
 * The agents of a run's tasks, checked before anything starts: a row naming an unknown agent, or a
 * harness on a sandbox without the proxy channel (`local` has none), is a `ConfigError`.
 */
export function checkAgents(tasks: readonly TaskSpec[], config: Config): Set<AgentKind> {
  const kinds = new Set<AgentKind>();
  for (const task of tasks) {
    try {
      kinds.add(agentOfTask(task, config.agent));
    } catch (error) {
      throw new ConfigError(`dataset row ${task.id}: ${(error as Error).message}`, { cause: error });
    }
  }
  const harnesses = [...kinds].filter((k) => k !== 'mini-swe-agent');
  if (harnesses.length > 0 && config.sandbox === 'local') {
    throw new ConfigError(
      `--sandbox local: the agent ${harnesses.join(', ')} reaches the capture proxy through a channel only the bubblewrap and docker sandboxes provide; use --sandbox bubblewrap or docker, or --agent mini-swe-agent`,
    );
  }
  return kinds;
}

/** Whether any of these agents is a harness (reaching the proxy through its unix socket). */
export function usesHarness(kinds: ReadonlySet<AgentKind>): boolean {
  return [...kinds].some((k) => k !== 'mini-swe-agent');
}

/**
 * A unix socket path for the capture proxy when `wanted` (the run has harness agents): in a fresh folder
 * every user can walk (the harness runs as the sandbox's unprivileged uid), removed by `close`.
 */
export async function harnessSocket(
  wanted: boolean,
): Promise<{ socketPath: string | undefined; close: () => Promise<void> }> {
  if (!wanted) return { socketPath: undefined, close: async () => {} };
  const dir = await mkdtemp(join(tmpdir(), 'vime-proxy-'));
  await chmod(dir, 0o755);
  return { socketPath: join(dir, 'proxy.sock'), close: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * The eval phase both kinds of rollout share: capture the agent's change as a patch, release the agent's
 * sandbox (nothing of it but the patch reaches grading), grade in a fresh sandbox with the anti-hack
 * checks; a grading infrastructure failure throws.
 */
export async function gradeRollout(
  ctx: RolloutContext,
  input: {
    pools: SwePools;
    task: TaskSpec;
    swe: SweSession;
    sandbox: Sandbox;
    transcript: string[];
    config: Config;
    onReleased: () => void;
  },
): Promise<Extract<SweGradeResult, { status: 'graded' }>> {
  const { pools, task, swe, sandbox, transcript, config } = input;
  const { signal } = ctx;
  const evalStart = performance.now();
  const graded = await ctx.phase('eval', async () => {
    const captured = await captureAgentPatch(swe, { signal });
    await pools.release(sandbox);
    input.onReleased();
    return gradeInFreshSandbox(pools, task, captured, {
      transcript,
      timeoutMs: config.gradeTimeoutMs,
      onSuspicious: config.onSuspicious,
      signal,
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

export interface HarnessRolloutDeps {
  config: Config;
  proxy: CaptureProxy;
  pools: SwePools;
  model: string;
  onClaim?: () => void;
}

/** The commands a harness ran, from its event log, for the grader's anti-hack checks. */
export function harnessTranscript(run: HarnessRun): string[] {
  const commands: string[] = [];
  for (const event of run.events as Array<Record<string, unknown>>) {
    if (event.type === 'assistant') {
      const content = (event.message as { content?: unknown } | undefined)?.content;
      if (!Array.isArray(content)) continue;
      for (const block of content as Array<{ type?: string; name?: string; input?: unknown }>) {
        if (block.type !== 'tool_use') continue;
        const input = block.input as { command?: unknown } | undefined;
        commands.push(
          typeof input?.command === 'string' ? input.command : `${block.name} ${JSON.stringify(input)}`,
        );
      }
    } else if (event.type === 'item.completed') {
      const item = event.item as { type?: string; command?: unknown } | undefined;
      if (item?.type === 'command_execution' && typeof item.command === 'string') commands.push(item.command);
    }
  }
  return commands;
}

export function harnessRolloutOf({ config, proxy, pools, model, onClaim }: HarnessRolloutDeps) {
  // One install per harness per run, shared by its rollouts; a failed install is retried by the next.
  const installs = new Map<HarnessKind, Promise<InstalledHarness>>();
  const install = (kind: HarnessKind, signal: AbortSignal) => {
    let pending = installs.get(kind);
    if (!pending) {
      pending = installHarness(kind, { registry: config.harnessRegistry, signal });
      pending.catch(() => installs.delete(kind));
      installs.set(kind, pending);
    }
    return pending;
  };
  return async (kind: HarnessKind, task: TaskSpec, ctx: RolloutContext): Promise<RolloutOutcome> => {
    const { signal } = ctx;
    const socketPath = proxy.socketPath;
    if (!socketPath) {
      throw new ConfigError(
        `metadata.agent ${JSON.stringify(kind)} of ${task.id} needs the capture proxy on a unix socket (startCaptureProxy({ socketPath })); this proxy has none`,
      );
    }
    const installed = await ctx.phase('claim', () => install(kind, signal));
    const sandbox = await ctx.phase('claim', async () => {
      await proxy.router.whenAvailable({ signal });
      onClaim?.();
      return pools.create(task, harnessSandboxSpec(installed, socketPath), { signal });
    });
    // The session id is the harness's only credential on a proxy every harness sandbox reaches.
    const sessionId = randomUUID();
    let opened = false;
    let finished = false;
    let released = false;
    let modelMs = 0;
    let aborted = 0;
    const onTurn = (e: { sessionId: string; durationMs: number }) => {
      if (e.sessionId === sessionId) modelMs += e.durationMs;
    };
    const onAbort = (e: { sessionId: string }) => {
      if (e.sessionId === sessionId) aborted++;
    };
    proxy.events.on('turn', onTurn);
    proxy.events.on('turn:abort', onAbort);
    try {
      const swe = await ctx.phase('setup', () => setupSweTask(sandbox, task, { signal }));
      proxy.openSession(sessionId, {
        sampling: { temperature: config.temperature, topP: config.topP, maxTokens: config.maxTokensPerTurn },
        maxContextTokens: config.maxContextTokens,
      });
      opened = true;
      const run = await ctx.phase('agent', () =>
        runHarness({
          installed,
          sandbox,
          proxy,
          sessionId,
          prompt: task.prompt,
          model,
          timeoutMs: config.agentTimeoutMs,
          signal,
        }),
      );
      if (run.turns.length === 0) {
        throw new HarnessError(
          'harness_run',
          `${kind} on ${task.id} reached the capture proxy with no turn (exit ${run.exitCode}${run.timedOut ? ', killed at its time budget' : ''}): the channel or the engine failed; ${run.stderr.trim().split('\n').slice(-3).join(' | ')}`,
        );
      }
      if (run.timedOut && aborted > 0) {
        throw new HarnessError(
          'harness_run',
          `${kind} on ${task.id} was killed at its time budget (${config.agentTimeoutMs} ms) while its request waited on the engine: an engine stall, not the agent's doing`,
        );
      }
      const graded = await gradeRollout(ctx, {
        pools,
        task,
        swe,
        sandbox,
        transcript: harnessTranscript(run),
        config,
        onReleased: () => {
          released = true;
        },
      });
      const exitStatus = run.timedOut ? 'LimitsExceeded' : run.exitCode === 0 ? 'Submitted' : 'HarnessExited';
      const status = run.timedOut ? 'truncated' : 'completed';
      const metadata = {
        instance_id: task.id,
        agent: kind,
        harness: `${installed.package.name}@${installed.package.version}`,
        exit_status: exitStatus,
        harness_exit_code: run.exitCode,
        resolution: graded.resolution,
        grade_outcome: graded.outcome,
        hacks: graded.hacks,
        hack_flags: graded.flags.map((f) => f.kind),
      };
      const samples = proxy.finishSession(sessionId, {
        reward: graded.reward,
        status,
        baseSample: { label: task.id, metadata },
      });
      finished = true;
      return {
        reward: graded.reward,
        status,
        samples,
        sessionId,
        turns: run.turns.length,
        timings: { model: modelMs },
        metadata: { ...metadata, execCallsMs: [] },
      };
    } finally {
      proxy.events.off('turn', onTurn);
      proxy.events.off('turn:abort', onAbort);
      if (opened && !finished) proxy.finishSession(sessionId, { status: 'failed' });
      if (!released) await pools.release(sandbox);
    }
  };
}
