/**
 * What the bubblewrap and local sandboxes share: on-disk state, registration for leak-proofing, exec
 * events, and terminate (through `SandboxOps`, as every provider).
 */
import { access } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { SandboxError } from '@vime/core';
import { register } from '../lifecycle.js';
import { SandboxOps } from '../ops.js';
import type {
  ExecOptions,
  ExecResult,
  OpOptions,
  ReadOptions,
  Sandbox,
  SandboxCapabilities,
  SandboxEmitter,
  SandboxSpec,
  TerminateReason,
} from '../types.js';
import type { RunResult } from './run-process.js';
import type { HostState } from './state.js';

/** Exec options as the providers receive them: stdin may also be a stream (`copyIn`). */
export type RunExecOptions = Omit<ExecOptions, 'stdin'> & {
  stdin?: string | Uint8Array | Readable | undefined;
};

/** Resolve a sandbox path: relative paths are under the work dir; the result is normalized and absolute. */
export function sandboxPath(workdir: string, path: string): string {
  if (typeof path !== 'string' || path.length === 0) {
    throw new SandboxError(`path must be a non-empty string, got ${JSON.stringify(path)}`, {
      code: 'invalid_argument',
    });
  }
  return posix.resolve(workdir, path);
}

export interface HostSandboxInit {
  id: string;
  provider: string;
  spec: SandboxSpec;
  state: HostState;
  labels: Record<string, string>;
  events: SandboxEmitter;
  capabilities: SandboxCapabilities;
  handleSignals: boolean;
}

export abstract class HostSandbox implements Sandbox {
  readonly id: string;
  readonly provider: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly capabilities: SandboxCapabilities;
  abstract readonly workdir: string;
  protected readonly spec: SandboxSpec;
  protected readonly state: HostState;
  protected readonly events: SandboxEmitter;
  protected readonly ops: SandboxOps;

  constructor(init: HostSandboxInit) {
    this.id = init.id;
    this.provider = init.provider;
    this.labels = init.labels;
    this.capabilities = init.capabilities;
    this.spec = init.spec;
    this.state = init.state;
    this.events = init.events;
    const unregister = register(this, {
      handleSignals: init.handleSignals,
      lifetimeMs: init.spec.lifetimeMs,
    });
    this.ops = new SandboxOps({ id: this.id, provider: this.provider, events: this.events, unregister });
  }

  protected abstract run(
    command: string | readonly string[],
    options: ExecOptions,
    raw: boolean,
  ): Promise<RunResult>;

  async exec(command: string | readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
    const result = await this.ops.track(options, (signal) =>
      this.run(command, { ...options, signal }, false),
    );
    this.events.emit('exec', {
      id: this.id,
      provider: this.provider,
      durationMs: result.durationMs,
      exitCode: result.exitCode,
      timedOut: result.timedOut,
    });
    const { signal: _signal, raw: _raw, ...rest } = result;
    return rest;
  }

  abstract writeFile(
    path: string,
    content: string | Uint8Array,
    options?: OpOptions & { mode?: number | undefined },
  ): Promise<void>;
  abstract readFile(path: string, options?: ReadOptions): Promise<Uint8Array>;
  abstract copyIn(hostDir: string, path: string, options?: OpOptions): Promise<void>;

  async readTextFile(path: string, options: ReadOptions = {}): Promise<string> {
    return new TextDecoder('utf-8', { fatal: false }).decode(await this.readFile(path, options));
  }

  async isAlive(_options: OpOptions = {}): Promise<boolean> {
    if (this.ops.terminating) return false;
    try {
      await access(this.state.dir);
      return true;
    } catch {
      return false;
    }
  }

  terminate(): Promise<void> {
    return this.terminateWith('requested');
  }

  terminateWith(reason: TerminateReason): Promise<void> {
    return this.ops.terminate(
      reason,
      () => this.state.cleanup(),
      `cleanup of sandbox ${this.id} was incomplete`,
    );
  }
}
