/**
 * One harness run inside a sandbox: write its configuration, start it headless with a time budget, keep
 * its JSON event log, and return the session's captured turns beside it. The sandbox must come from
 * `harnessSandboxSpec` (the proxy channel and the binary bound read-only); the capture session must be
 * open on the proxy. Finishing the session (with the graded reward) stays with the caller.
 */
import type { Turn } from '@vime/core';
import { ConfigError } from '@vime/core';
import type { CaptureProxy } from '@vime/core/proxy';
import { PROXY_CHANNEL_PORT, type Sandbox, type SandboxSpec } from '@vime/sandbox';
import { CLAUDE_CODE_TOOLS, HARNESS_LAUNCHERS, HARNESS_MOUNT, NODE_MOUNT } from './adapters.js';
import { HarnessError } from './errors.js';
import type { HarnessKind, InstalledHarness } from './install.js';

/** What `metadata.agent` of a sample may pick: ours, or a real harness. */
export type AgentKind = 'mini-swe-agent' | HarnessKind;
/** Every agent `metadata.agent` can pick. */
export const AGENT_KINDS: readonly AgentKind[] = [
  'mini-swe-agent',
  'claude-code',
  'codex',
  'qwen-code',
  'pi',
  'opencode',
  'gemini-cli',
];

/**
 * `metadata.agent` of a dataset row as an `AgentKind` (default `mini-swe-agent` when absent or null, as a
 * missing parquet value reads), or a `ConfigError`.
 */
export function agentOf(metadata: Record<string, unknown> | undefined): AgentKind {
  const agent = metadata?.agent ?? 'mini-swe-agent';
  if (!AGENT_KINDS.includes(agent as AgentKind)) {
    throw new ConfigError(
      `metadata.agent: expected one of ${AGENT_KINDS.join(', ')}, found ${JSON.stringify(agent)}`,
    );
  }
  return agent as AgentKind;
}

/**
 * The spec fields a harness sandbox needs: the proxy channel and the harness package (and the Node of a
 * JavaScript harness), read-only.
 */
export function harnessSandboxSpec(
  installed: InstalledHarness,
  proxySocketPath: string,
  port: number = PROXY_CHANNEL_PORT,
): Pick<SandboxSpec, 'proxy' | 'readOnlyBinds'> {
  const binds = [{ source: installed.dir, target: HARNESS_MOUNT }];
  if (installed.runtime) binds.push({ source: installed.runtime.dir, target: NODE_MOUNT });
  return { proxy: { socketPath: proxySocketPath, port }, readOnlyBinds: binds };
}

/** Options of `runHarness`. */
export interface HarnessRunOptions {
  installed: InstalledHarness;
  sandbox: Sandbox;
  proxy: CaptureProxy;
  /** The open capture session; its key (`CaptureSession.apiKey`) is the harness's API key. */
  sessionId: string;
  prompt: string;
  /** Model name the harness asks for (the proxy serves whatever its engine runs). */
  model: string;
  /** Wall-clock budget of the whole run, ms. */
  timeoutMs: number;
  /** The channel port the sandbox was created with (default `PROXY_CHANNEL_PORT`). */
  port?: number | undefined;
  /** Claude Code's tools (default `CLAUDE_CODE_TOOLS`). */
  tools?: readonly string[] | undefined;
  /** Working directory of the harness (default the sandbox's work dir). */
  cwd?: string | undefined;
  /**
   * More environment for the harness (e.g. Claude Code's `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`). It cannot
   * replace what the launch sets (the proxy's URL and key, `HOME`, `PATH`, traffic off): such a name is a
   * `ConfigError`.
   */
  env?: Readonly<Record<string, string>> | undefined;
  /**
   * Codex only: more top-level keys of its `config.toml` (e.g. `model_context_window`,
   * `model_auto_compact_token_limit`); a key the launch writes is a `ConfigError`.
   */
  codexConfig?: Readonly<Record<string, string | number | boolean>> | undefined;
  signal?: AbortSignal | undefined;
}

/** What a harness run did: exit code, duration, its event log, stderr and the captured turns. */
export interface HarnessRun {
  harness: HarnessKind;
  exitCode: number | null;
  timedOut: boolean;
  durationMs: number;
  /** The harness's JSON event log as it printed it (JSON Lines). */
  eventLog: string;
  /** Its parsed events; lines that are not JSON are left out (and kept in `eventLog`). */
  events: unknown[];
  stderr: string;
  /** The session's captured turns so far (the trained trajectory once the session is finished). */
  turns: Turn[];
}

/** Run a harness headless in its sandbox against the proxy session. */
export async function runHarness(options: HarnessRunOptions): Promise<HarnessRun> {
  const { installed, sandbox, proxy, sessionId } = options;
  const harness = installed.kind;
  const launcher = HARNESS_LAUNCHERS[harness];
  const session = proxy.session(sessionId);
  if (!session) {
    throw new ConfigError(`runHarness: session ${JSON.stringify(sessionId)} is not open on the proxy`);
  }
  if (!(Number.isFinite(options.timeoutMs) && options.timeoutMs > 0)) {
    throw new ConfigError(`runHarness: timeoutMs must be a positive number, found ${options.timeoutMs}`);
  }
  if (options.codexConfig && harness !== 'codex') {
    throw new ConfigError(`runHarness: codexConfig is for Codex only, not ${harness}; leave it out`);
  }
  const launch = launcher({
    installed,
    baseUrl: `http://127.0.0.1:${options.port ?? PROXY_CHANNEL_PORT}`,
    sessionKey: session.apiKey,
    model: options.model,
    prompt: options.prompt,
    tools: options.tools ?? CLAUDE_CODE_TOOLS,
    codexConfig: options.codexConfig,
  });
  for (const name of Object.keys(options.env ?? {})) {
    if (name in launch.env) {
      throw new ConfigError(
        `runHarness: env.${name} is set by the ${harness} launch and cannot be replaced; leave it out of env`,
      );
    }
  }
  const op = options.signal ? { signal: options.signal } : {};
  for (const [path, content] of Object.entries(launch.files)) await sandbox.writeFile(path, content, op);
  const result = await sandbox.exec(launch.argv, {
    env: { ...options.env, ...launch.env },
    cwd: options.cwd ?? sandbox.workdir,
    timeoutMs: options.timeoutMs,
    // Headless: nothing on stdin unless the harness reads its prompt there (Codex would otherwise wait
    // for more prompt).
    stdin: launch.stdin ?? '',
    maxOutputBytes: 64 << 20,
    ...op,
  });
  if (result.truncated) {
    throw new HarnessError(
      'harness_run',
      `${harness} printed more than 64 MiB of events in sandbox ${sandbox.id}; its event log was cut, so the run is not kept`,
    );
  }
  const events: unknown[] = [];
  for (const line of result.stdout.split('\n')) {
    if (!line.trim().startsWith('{')) continue;
    try {
      events.push(JSON.parse(line));
    } catch {
      // kept in eventLog only
    }
  }
  return {
    harness,
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    durationMs: result.durationMs,
    eventLog: result.stdout,
    events,
    stderr: result.stderr,
    turns: proxy.trajectories.trajectory(sessionId).turns,
  };
}
