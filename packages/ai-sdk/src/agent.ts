/**
 * An AI SDK agent as the agent `sweRollout` runs: the user's own agent code, handed the capture session
 * as its model and the rollout's sandbox as its `experimental_sandbox`; every model call is a training
 * turn, every command it runs is on the transcript the grader's anti-hack checks read.
 */
import { APICallError, type LanguageModelV4 } from '@ai-sdk/provider';
import { ConfigError, EngineError, type TaskSpec } from '@vime/core';
import type { SweAgent, SweAgentInput, SweAgentRun } from '@vime/swe';
import { RetryError, type Experimental_SandboxSession as SandboxSession } from 'ai';
import { captureModel } from './model.js';
import { aiSandbox } from './sandbox.js';

/** What the user's agent function gets for one rollout. */
export interface AiSdkAgentInput {
  /** The capture session as an AI SDK model: the `model` of `generateText`, `streamText`, a `ToolLoopAgent`. */
  model: LanguageModelV4;
  /** The rollout's sandbox as the AI SDK's sandbox session: pass it as `experimental_sandbox`. */
  sandbox: SandboxSession;
  /** The task (its `prompt` is the issue text the agent is asked to fix). */
  task: TaskSpec;
  /** Aborted when the rollout is stopped: pass it as `abortSignal`. */
  abortSignal: AbortSignal;
}

/**
 * What the agent function returns: the AI SDK's result (`generateText`'s, `agent.generate`'s, or
 * `streamText`'s, whose `finishReason` is a promise).
 */
export interface AiSdkAgentResult {
  finishReason: string | PromiseLike<string>;
}

/** The user's agent: runs the task with the given model and sandbox; returns its result, or nothing. */
export type AiSdkAgentFunction = (
  input: AiSdkAgentInput,
) => Promise<AiSdkAgentResult | undefined> | Promise<void>;

/** Options of `aiSdkAgent`. */
export interface AiSdkAgentOptions {
  /** The agent's name on the rows (`metadata.agent`). Default `ai-sdk`. */
  kind?: string | undefined;
  /** Model name sent to the proxy. Default `vime-policy`. */
  modelId?: string | undefined;
  /** Timeout of one command the agent runs in its sandbox (default 60 s). */
  commandTimeoutMs?: number | undefined;
}

/**
 * An `SweAgent` that runs an AI SDK agent: `sweRollout({ agent: aiSdkAgent(fn), ... })`. A 5xx from the
 * capture proxy (no healthy engine) is an infrastructure failure, thrown as an `EngineError`; an agent
 * that stops at its step limit (its last step still asked for tools) is `LimitsExceeded`, still graded.
 */
export function aiSdkAgent(fn: AiSdkAgentFunction, options: AiSdkAgentOptions = {}): SweAgent {
  if (typeof fn !== 'function') {
    throw new ConfigError(
      `aiSdkAgent: the agent must be a function ({ model, sandbox, task }) => result; got ${typeof fn}`,
    );
  }
  const kind = options.kind ?? 'ai-sdk';
  return {
    kind,
    async run({ task, sandbox, session, signal }: SweAgentInput): Promise<SweAgentRun> {
      const transcript: string[] = [];
      let turns = 0;
      const model = captureModel(session, { modelId: options.modelId, onRequest: () => turns++ });
      const tools = aiSandbox(sandbox, {
        commandTimeoutMs: options.commandTimeoutMs,
        onAction: (action) => transcript.push(action),
      });
      // A streamed result's failure surfaces in its `finishReason`: awaited inside the engine check too.
      const finishReason = await engineFailure(
        (async () => {
          const result = await fn({ model, sandbox: tools, task, abortSignal: signal });
          return result ? await result.finishReason : 'stop';
        })(),
      );
      const truncated = finishReason === 'tool-calls' || finishReason === 'length';
      return {
        exitStatus: finishReason === 'tool-calls' ? 'LimitsExceeded' : truncated ? 'TokenLimit' : 'Submitted',
        truncated,
        turns,
        transcript,
        metadata: { finish_reason: finishReason },
      };
    },
  };
}

/** The HTTP failure under the AI SDK's retry wrapper, if any. */
function apiCallErrorOf(error: unknown): APICallError | undefined {
  if (APICallError.isInstance(error)) return error;
  if (RetryError.isInstance(error)) return apiCallErrorOf(error.lastError);
  return undefined;
}

/** A 5xx from the proxy means no engine could answer: never something the agent did. */
async function engineFailure<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    const http = apiCallErrorOf(error);
    if (http?.statusCode !== undefined && http.statusCode >= 500) {
      throw new EngineError(`the capture proxy answered ${http.statusCode}: ${http.message}`, {
        cause: error,
        isRetryable: http.statusCode === 503,
      });
    }
    throw error;
  }
}
