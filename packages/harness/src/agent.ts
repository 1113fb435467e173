/**
 * The agents `sweRollout` of `@vime/swe` runs: our mini-swe-agent (an OpenAI client against the session)
 * or a real harness (Claude Code, Codex, Qwen Code, pi, opencode, Gemini CLI), picked per sample by `metadata.agent`.
 *
 * Failure taxonomy of a harness: an install failure, a harness that never reached the proxy (a broken
 * channel), or a harness killed at its budget while its request waited on the engine (a stalled engine)
 * is an infrastructure failure (thrown, never reward 0). A harness that gives up, exits with an error of
 * its own or runs out of time between model turns is an ordinary graded outcome.
 */
import { ConfigError, EngineError, type TaskSpec } from '@vime/core';
import type { CaptureProxy } from '@vime/core/proxy';
import type { SweAgent, SweAgentInput, SweAgentRun } from '@vime/swe';
import OpenAI from 'openai';
import { HarnessError } from './errors.js';
import { type HarnessKind, type InstalledHarness, installHarness } from './install.js';
import { runAgent } from './mini-swe-agent/agent.js';
import { type AgentKind, agentOf, type HarnessRun, harnessSandboxSpec, runHarness } from './run.js';

/** Options of `harnessAgent`. */
export interface HarnessAgentOptions {
  /** Model name the agent asks for (the proxy serves whatever its engine runs). Default `vime-policy`. */
  model?: string | undefined;
  /** mini-swe-agent: model calls per rollout; 0 for no limit (default 12). */
  maxTurns?: number | undefined;
  /** A CLI harness: wall-clock budget of one run; the harness is killed at its end (default 10 min). */
  timeoutMs?: number | undefined;
  /** A CLI harness: npm registry (a mirror) the pinned tarballs come from, once per agent. */
  registry?: string | undefined;
}

/** The sample's agent: its row's `metadata.agent`, else `fallback`. */
export function agentOfTask(task: TaskSpec, fallback: AgentKind): AgentKind {
  return task.metadata.agent == null ? fallback : agentOf(task.metadata);
}

/** An agent of `kind` for `sweRollout`. A harness is installed once per agent, on its first rollout. */
export function harnessAgent(kind: AgentKind, options: HarnessAgentOptions = {}): SweAgent {
  return kind === 'mini-swe-agent' ? miniSweAgent(options) : new CliHarnessAgent(kind, options);
}

function miniSweAgent(options: HarnessAgentOptions): SweAgent {
  return {
    kind: 'mini-swe-agent',
    async run({ task, exec, proxy, session, signal }: SweAgentInput): Promise<SweAgentRun> {
      // A standard OpenAI client: the session's key is its API key, as any harness would send it.
      const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session.apiKey, maxRetries: 0 });
      const transcript: string[] = [];
      const agent = await engineFailure(
        runAgent({
          client,
          model: options.model ?? 'vime-policy',
          task: task.prompt,
          stepLimit: options.maxTurns ?? 12,
          signal,
          exec: (command) => {
            transcript.push(command);
            return exec(command);
          },
        }),
      );
      return {
        exitStatus: agent.exitStatus,
        truncated: agent.exitStatus === 'LimitsExceeded',
        turns: agent.steps,
        transcript,
        metadata: { format_errors: agent.formatErrors },
      };
    },
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

/**
 * A CLI harness (Claude Code, Codex, Qwen Code, pi, opencode, Gemini CLI), unmodified and headless, in a sandbox that reaches
 * only the capture proxy.
 */
class CliHarnessAgent implements SweAgent {
  #install: Promise<InstalledHarness> | undefined;

  constructor(
    readonly kind: HarnessKind,
    private readonly options: HarnessAgentOptions,
  ) {}

  /** One install per agent, shared by its rollouts; a failed install is retried by the next. */
  #installed(signal: AbortSignal): Promise<InstalledHarness> {
    if (!this.#install) {
      this.#install = installHarness(this.kind, { registry: this.options.registry, signal });
      this.#install.catch(() => {
        this.#install = undefined;
      });
    }
    return this.#install;
  }

  sandboxSpec = async (proxy: CaptureProxy, signal: AbortSignal) => {
    const socketPath = proxy.socketPath;
    if (!socketPath) {
      throw new ConfigError(
        `the agent ${this.kind} needs the capture proxy on a unix socket (startCaptureProxy({ socketPath })); this proxy has none`,
      );
    }
    return harnessSandboxSpec(await this.#installed(signal), socketPath);
  };

  async run({ task, sandbox, proxy, session, signal }: SweAgentInput): Promise<SweAgentRun> {
    const timeoutMs = this.options.timeoutMs ?? 600_000;
    let aborted = 0;
    const onAbort = (e: { sessionId: string }) => {
      if (e.sessionId === session.id) aborted++;
    };
    proxy.events.on('turn:abort', onAbort);
    let run: HarnessRun;
    try {
      const installed = await this.#installed(signal);
      run = await runHarness({
        installed,
        sandbox,
        proxy,
        sessionId: session.id,
        prompt: task.prompt,
        model: this.options.model ?? 'vime-policy',
        timeoutMs,
        signal,
      });
      this.#checkRun(run, task, aborted, timeoutMs);
      const exitStatus = run.timedOut ? 'LimitsExceeded' : run.exitCode === 0 ? 'Submitted' : 'HarnessExited';
      return {
        exitStatus,
        truncated: run.timedOut,
        turns: run.turns.length,
        transcript: harnessTranscript(run),
        metadata: {
          harness: `${installed.package.name}@${installed.package.version}`,
          harness_exit_code: run.exitCode,
        },
      };
    } finally {
      proxy.events.off('turn:abort', onAbort);
    }
  }

  /** A run that never reached the proxy, or that a stalled engine ran out of time, is not the agent's doing. */
  #checkRun(run: HarnessRun, task: TaskSpec, aborted: number, timeoutMs: number): void {
    if (run.turns.length === 0) {
      throw new HarnessError(
        'harness_run',
        `${this.kind} on ${task.id} reached the capture proxy with no turn (exit ${run.exitCode}${run.timedOut ? ', killed at its time budget' : ''}): the channel or the engine failed; ${run.stderr.trim().split('\n').slice(-3).join(' | ')}`,
      );
    }
    if (run.timedOut && aborted > 0) {
      throw new HarnessError(
        'harness_run',
        `${this.kind} on ${task.id} was killed at its time budget (${timeoutMs} ms) while its request waited on the engine: an engine stall, not the agent's doing`,
      );
    }
  }
}

/** The commands a harness ran, from its event log, for the grader's anti-hack checks. */
export function harnessTranscript(run: HarnessRun): string[] {
  const commands: string[] = [];
  for (const event of run.events as Array<Record<string, unknown>>) {
    if (event.type === 'assistant') {
      const content = (event.message as { content?: unknown } | undefined)?.content;
      if (!Array.isArray(content)) continue;
      for (const block of content as Array<{
        type?: string | undefined;
        name?: string | undefined;
        input?: unknown;
      }>) {
        if (block.type !== 'tool_use') continue;
        const input = block.input as { command?: unknown } | undefined;
        commands.push(
          typeof input?.command === 'string' ? input.command : `${block.name} ${JSON.stringify(input)}`,
        );
      }
    } else if (event.type === 'tool_execution_start') {
      // pi's JSON mode: one event per tool call it runs.
      const args = event.args as { command?: unknown } | undefined;
      commands.push(
        typeof args?.command === 'string' ? args.command : `${event.toolName} ${JSON.stringify(args)}`,
      );
    } else if (event.type === 'tool_use') {
      // One event per tool call: opencode's input in its part's state, Gemini CLI's in `parameters`.
      const part = event.part as
        | { tool?: string | undefined; state?: { input?: unknown } | undefined }
        | undefined;
      const name = part ? part.tool : event.tool_name;
      const input = (part ? part.state?.input : event.parameters) as { command?: unknown } | undefined;
      commands.push(typeof input?.command === 'string' ? input.command : `${name} ${JSON.stringify(input)}`);
    } else if (event.type === 'item.completed') {
      const item = event.item as { type?: string | undefined; command?: unknown } | undefined;
      if (item?.type === 'command_execution' && typeof item.command === 'string') commands.push(item.command);
    }
  }
  return commands;
}
