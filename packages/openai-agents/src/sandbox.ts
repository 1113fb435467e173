/**
 * Vime sandboxes behind the OpenAI Agents SDK's sandbox interfaces: a `SandboxSession` over one Vime
 * sandbox (what a `SandboxAgent`'s shell and file tools call), and a `SandboxClient` that creates such
 * sessions from a Vime provider.
 */
import { posix } from 'node:path';
import {
  Manifest,
  type SandboxClient,
  type SandboxDirectoryEntry,
  type SandboxExecResult,
  type SandboxSession,
  type SandboxSessionState,
} from '@openai/agents/sandbox';
import { ConfigError, SandboxError } from '@vime/core';
import type { ExecResult, Sandbox, SandboxProvider, SandboxSpec } from '@vime/sandbox';

/** Options of `agentsSandboxSession`. */
export interface AgentsSandboxOptions {
  /** Timeout of one command (default 60 s, as `sweRollout`'s); a command past it exits 124. */
  commandTimeoutMs?: number | undefined;
  /** Called with each command the agent runs (the rollout's transcript). */
  onAction?: ((action: string) => void) | undefined;
  /** Terminate the sandbox when the Agents SDK closes or deletes the session (default false: the caller owns it). */
  owned?: boolean | undefined;
}

/** Exit code of a command killed at its timeout (as coreutils' `timeout` reports it). */
export const AGENTS_COMMAND_TIMEOUT_EXIT = 124;

// `$1` is the path, an argument, never spliced into the script. Exit 3: no such directory.
const LIST = 'if [ ! -d "$1" ]; then exit 3; fi; find -H "$1" -mindepth 1 -maxdepth 1 -printf "%y\\t%f\\0"';
const APPROX_BYTES_PER_TOKEN = 4;

/** A session of the Agents SDK over a Vime sandbox; its manifest's root is the sandbox's work dir. */
class VimeAgentsSession implements SandboxSession {
  state: SandboxSessionState;
  readonly #timeoutMs: number;

  constructor(
    readonly sandbox: Sandbox,
    private readonly options: AgentsSandboxOptions,
  ) {
    // The workspace is the sandbox's, set up by the rollout: nothing for the SDK to materialize.
    this.state = { manifest: new Manifest({ root: sandbox.workdir }), workspaceReady: true };
    this.#timeoutMs = options.commandTimeoutMs ?? 60_000;
  }

  #path(path: string): string {
    if (typeof path !== 'string' || path === '') {
      throw new ConfigError(`sandbox path: ${JSON.stringify(path)} is not a path; pass a file path`);
    }
    return posix.resolve(this.sandbox.workdir, path);
  }

  async #run(cmd: string, workdir: string | undefined, shell: string | undefined): Promise<ExecResult> {
    if (typeof cmd !== 'string' || cmd.trim() === '') {
      throw new ConfigError(`exec: cmd ${JSON.stringify(cmd)} is empty; pass a shell command`);
    }
    this.options.onAction?.(cmd);
    return this.sandbox.exec([shell ?? 'sh', '-c', cmd], {
      cwd: workdir === undefined ? undefined : this.#path(workdir),
      timeoutMs: this.#timeoutMs,
    });
  }

  exec = async (args: { cmd: string; workdir?: string; shell?: string }): Promise<SandboxExecResult> => {
    const r = await this.#run(args.cmd, args.workdir, args.shell);
    const stderr = r.timedOut
      ? `${r.stderr}\n[killed at the command timeout of ${this.#timeoutMs} ms]\n`
      : r.stderr;
    return {
      output: r.timedOut ? `${r.output}${stderr.slice(r.stderr.length)}` : r.output,
      stdout: r.stdout,
      stderr,
      wallTimeSeconds: r.durationMs / 1000,
      exitCode: r.exitCode ?? AGENTS_COMMAND_TIMEOUT_EXIT,
    };
  };

  /** The shell tool's answer, in the Agents SDK's own layout (wall time, exit code, output). */
  execCommand = async (args: {
    cmd: string;
    workdir?: string;
    shell?: string;
    maxOutputTokens?: number;
  }): Promise<string> => {
    const r = await this.exec(args);
    const max =
      args.maxOutputTokens === undefined ? undefined : args.maxOutputTokens * APPROX_BYTES_PER_TOKEN;
    const output =
      max !== undefined && r.output.length > max ? `${r.output.slice(0, max)}\n[output cut]` : r.output;
    return [
      `Wall time: ${r.wallTimeSeconds.toFixed(4)} seconds`,
      `Process exited with code ${r.exitCode}`,
      'Output:',
      output,
    ].join('\n');
  };

  supportsPty = () => false;

  readFile = async (args: { path: string; maxBytes?: number }): Promise<Uint8Array> =>
    this.sandbox.readFile(this.#path(args.path), { maxBytes: args.maxBytes });

  listDir = async (args: { path: string }): Promise<SandboxDirectoryEntry[]> => {
    const abs = this.#path(args.path);
    const r = await this.sandbox.exec(['sh', '-c', LIST, 'sh', abs], { timeoutMs: this.#timeoutMs });
    if (r.exitCode === 3) throw new SandboxError(`listDir ${abs}: no such directory`);
    if (r.exitCode !== 0) throw new SandboxError(`listDir ${abs}: exit ${r.exitCode}: ${r.stderr.trim()}`);
    return r.stdout
      .split('\0')
      .filter((line) => line !== '')
      .map((line) => {
        const kind = line.slice(0, line.indexOf('\t'));
        const name = line.slice(line.indexOf('\t') + 1);
        return {
          name,
          path: posix.join(abs, name),
          type: kind === 'f' ? 'file' : kind === 'd' ? 'dir' : 'other',
        };
      });
  };

  pathExists = async (path: string): Promise<boolean> => this.#test('-e', path);

  directoryExists = async (path: string): Promise<boolean> => this.#test('-d', path);

  async #test(flag: '-e' | '-d', path: string): Promise<boolean> {
    const r = await this.sandbox.exec(['test', flag, this.#path(path)], { timeoutMs: this.#timeoutMs });
    return r.exitCode === 0;
  }

  running = async (): Promise<boolean> => this.sandbox.isAlive();

  close = async (): Promise<void> => {
    if (this.options.owned) await this.sandbox.terminate();
  };

  delete = this.close;
}

/**
 * The Agents SDK's sandbox session over a Vime sandbox: pass it as `run(agent, input, { sandbox: { session } })`
 * for a `SandboxAgent`. Commands run under `sh -c` in the sandbox with its limits; no PTY (`write_stdin`
 * is not offered).
 */
export function agentsSandboxSession(sandbox: Sandbox, options: AgentsSandboxOptions = {}): SandboxSession {
  return new VimeAgentsSession(sandbox, options);
}

/** Options of `agentsSandboxClient`. */
export interface AgentsSandboxClientOptions extends Omit<AgentsSandboxOptions, 'owned'> {
  /** The spec of every sandbox the client creates; its `workdir` is the manifest's root unless one is given. */
  spec: SandboxSpec;
}

/**
 * The Agents SDK's `SandboxClient` over a Vime provider: `run(agent, input, { sandbox: { client } })`
 * creates a fresh Vime sandbox per run (terminated when the SDK closes the session). A manifest's root
 * replaces the spec's work dir; manifest entries (files the SDK would materialize) are not supported.
 */
export function agentsSandboxClient(
  provider: SandboxProvider,
  options: AgentsSandboxClientOptions,
): SandboxClient {
  const create = async (args?: { manifest?: unknown } | Manifest): Promise<SandboxSession> => {
    const manifest = args instanceof Manifest ? args : (args?.manifest as Manifest | undefined);
    if (manifest && Object.keys(manifest.entries ?? {}).length > 0) {
      throw new ConfigError(
        `agentsSandboxClient: manifest entries (${Object.keys(manifest.entries).join(', ')}) are not supported; put the files in the sandbox's image or work dir`,
      );
    }
    const workdir = manifest?.root && manifest.root !== '/workspace' ? manifest.root : options.spec.workdir;
    const sandbox = await provider.create({ ...options.spec, workdir });
    return new VimeAgentsSession(sandbox, { ...options, owned: true });
  };
  return { backendId: `vime-${provider.name}`, create: create as NonNullable<SandboxClient['create']> };
}
