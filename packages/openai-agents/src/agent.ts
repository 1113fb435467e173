/**
 * An OpenAI Agents SDK agent as the agent `sweRollout` runs: the user's own agent code, handed the capture
 * session as its model and the rollout's sandbox as its sandbox session; every model call is a training
 * turn, every command it runs is on the transcript the grader's anti-hack checks read.
 */
import { MaxTurnsExceededError, type Model, type ModelProvider } from '@openai/agents';
import type { SandboxSession } from '@openai/agents/sandbox';
import { ConfigError, EngineError, type TaskSpec } from '@vime/core';
import type { SweAgent, SweAgentInput, SweAgentRun } from '@vime/swe';
import OpenAI from 'openai';
import { type AgentsApi, captureAgentsModel } from './model.js';
import { agentsSandboxSession } from './sandbox.js';

/** What the user's agent function gets for one rollout. */
export interface AgentsSdkAgentInput {
  /** The capture session as an Agents SDK model: an `Agent`'s `model`. */
  model: Model;
  /** The same model as a provider, for `new Runner({ modelProvider })`. */
  modelProvider: ModelProvider;
  /** The rollout's sandbox as the Agents SDK's sandbox session: `run(agent, input, { sandbox: { session } })`. */
  sandbox: SandboxSession;
  /** The task (its `prompt` is the issue text the agent is asked to fix). */
  task: TaskSpec;
  /** Aborted when the rollout is stopped: pass it as the run's `signal`. */
  signal: AbortSignal;
}

/** The user's agent: runs the task with the given model and sandbox (its result is not read). */
export type AgentsSdkAgentFunction = (input: AgentsSdkAgentInput) => Promise<unknown>;

/** Options of `agentsSdkAgent`. */
export interface AgentsSdkAgentOptions {
  /** The agent's name on the rows (`metadata.agent`). Default `openai-agents`. */
  kind?: string | undefined;
  /** `chat-completions` (the default) or `responses`. */
  api?: AgentsApi | undefined;
  /** Model name sent to the proxy. Default `vime-policy`. */
  modelId?: string | undefined;
  /** Timeout of one command the agent runs in its sandbox (default 60 s). */
  commandTimeoutMs?: number | undefined;
}

/**
 * An `SweAgent` that runs an Agents SDK agent: `sweRollout({ agent: agentsSdkAgent(fn), ... })`. A 5xx
 * from the capture proxy (no healthy engine) is an infrastructure failure, thrown as an `EngineError`; a
 * run stopped at its `maxTurns` (`MaxTurnsExceededError`) is `LimitsExceeded`, still graded.
 */
export function agentsSdkAgent(fn: AgentsSdkAgentFunction, options: AgentsSdkAgentOptions = {}): SweAgent {
  if (typeof fn !== 'function') {
    throw new ConfigError(
      `agentsSdkAgent: the agent must be a function ({ model, sandbox, task }) => result; got ${typeof fn}`,
    );
  }
  return {
    kind: options.kind ?? 'openai-agents',
    async run({ task, sandbox, session, signal }: SweAgentInput): Promise<SweAgentRun> {
      const transcript: string[] = [];
      let turns = 0;
      const model = captureAgentsModel(session, {
        api: options.api,
        modelId: options.modelId,
        onRequest: () => turns++,
      });
      const tools = agentsSandboxSession(sandbox, {
        commandTimeoutMs: options.commandTimeoutMs,
        onAction: (action) => transcript.push(action),
      });
      const modelProvider: ModelProvider = { getModel: async () => model };
      let limited = false;
      try {
        await fn({ model, modelProvider, sandbox: tools, task, signal });
      } catch (error) {
        if (!(error instanceof MaxTurnsExceededError)) throw engineFailure(error);
        limited = true;
      }
      return {
        exitStatus: limited ? 'LimitsExceeded' : 'Submitted',
        truncated: limited,
        turns,
        transcript,
        metadata: { api: options.api ?? 'chat-completions' },
      };
    },
  };
}

/** A 5xx from the proxy (anywhere on the error's cause chain) means no engine could answer. */
function engineFailure(error: unknown): unknown {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof OpenAI.APIError && e.status !== undefined && e.status >= 500) {
      return new EngineError(`the capture proxy answered ${e.status}: ${e.message}`, {
        cause: error,
        isRetryable: e.status === 503,
      });
    }
  }
  return error;
}
