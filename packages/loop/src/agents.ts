/**
 * The run's agents: each sample's agent is its row's `metadata.agent`, else `--agent`; the rollout is
 * `sweRollout` of `@vime/swe` with the agent `harnessAgent` of `@vime/harness` makes for that kind.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, type TaskSpec } from '@vime/core';
import type { Sampling } from '@vime/core/engine';
import type { CaptureProxy } from '@vime/core/proxy';
import type { RolloutFunction } from '@vime/core/runner';
import type { StandInPolicy } from '@vime/core/standin';
import { type AgentKind, agentOfTask, harnessAgent } from '@vime/harness';
import { type SweAgent, type SwePools, sweRollout } from '@vime/swe';
import type { Config } from './config/schema.js';

/**
 * Your own agent for every sample of a run, in place of the harness each row's `metadata.agent` picks:
 * an agent written with the AI SDK (`aiSdkAgent` of `@vime/ai-sdk`), the OpenAI Agents SDK
 * (`agentsSdkAgent` of `@vime/openai-agents`) or any `SweAgent`. It runs in the loop's process and reaches
 * the capture proxy over loopback HTTP; its commands run in the rollout's sandbox.
 */
export interface LoopAgent {
  agent: SweAgent;
  /**
   * What the stand-in engine answers when the run has no engine URL, given the run's tasks: a scripted
   * policy that calls this agent's tools (the bundled one speaks mini-swe-agent's protocol). Absent, the
   * bundled policy answers.
   */
  standInPolicy?: ((tasks: readonly TaskSpec[]) => StandInPolicy) | undefined;
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
export async function harnessSocket(wanted: boolean): Promise<{
  socketPath: string | undefined;
  /** Stop listening and remove the socket. */
  close: () => Promise<void>;
}> {
  if (!wanted) return { socketPath: undefined, close: async () => {} };
  const dir = await mkdtemp(join(tmpdir(), 'vime-proxy-'));
  await chmod(dir, 0o755);
  return { socketPath: join(dir, 'proxy.sock'), close: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * The sampling every turn of the run sends to the engine (the proxy's session sampling: it replaces what
 * a harness asks for). `top_k` and stop strings only when set, so the engine's defaults stay its own.
 */
export function samplingOf(config: Config): Sampling {
  return {
    temperature: config.temperature,
    topP: config.topP,
    maxTokens: config.maxTokensPerTurn,
    topK: config.topK,
    topLogprobs: config.topLogprobs,
    stop: config.stop.length > 0 ? config.stop : undefined,
  };
}

/** What `loopRollout` needs: the config, the proxy, the pools and the run's agents. */
export interface LoopRolloutDeps {
  config: Config;
  proxy: CaptureProxy;
  pools: SwePools;
  /** Model name sent to the engine through the proxy. */
  model: string;
  /** Called as a sandbox claim starts (after the circuit breaker let the rollout through). */
  onClaim?: (() => void) | undefined;
  /** Your agent for every sample (else each sample's harness). */
  agent?: SweAgent | undefined;
}

/** The run's rollout: `sweRollout` with each sample's agent, one agent (one harness install) per kind. */
export function loopRollout({
  config,
  proxy,
  pools,
  model,
  onClaim,
  agent: ownAgent,
}: LoopRolloutDeps): RolloutFunction<TaskSpec> {
  const agents = new Map<AgentKind, SweAgent>();
  const agentOf = (task: TaskSpec): SweAgent => {
    const kind = agentOfTask(task, config.agent);
    let agent = agents.get(kind);
    if (!agent) {
      agent = harnessAgent(kind, {
        model,
        maxTurns: config.maxTurns,
        timeoutMs: config.agentTimeoutMs,
        registry: config.harnessRegistry,
      });
      agents.set(kind, agent);
    }
    return agent;
  };
  return sweRollout({
    pools,
    proxy,
    agent: ownAgent ?? agentOf,
    sampling: samplingOf(config),
    maxContextTokens: config.maxContextTokens,
    execTimeoutMs: config.execTimeoutMs,
    gradeTimeoutMs: config.gradeTimeoutMs,
    onSuspicious: config.onSuspicious,
    onClaim,
  });
}
