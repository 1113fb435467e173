/**
 * A fleet sandbox: a backend's sandbox whose operations fail as `sandbox_backend_lost` once that backend
 * stops answering (in-flight ones are aborted then), and whose terminate gives its backend's slot back.
 */
import type {
  ExecOptions,
  ExecResult,
  OpOptions,
  ReadOptions,
  Sandbox,
  SandboxCapabilities,
} from '../types.js';

/** What a fleet sandbox needs of its fleet. */
export interface FleetSandboxHost {
  /** The backend's name. */
  readonly backend: string;
  /** Aborted (with the backend-lost error) when the backend is found lost. */
  lostSignal(): AbortSignal;
  /** The error to throw for an operation's failure: the backend-lost error when the backend is gone. */
  classify(sandboxId: string, error: unknown): Promise<unknown>;
  /** Throws the backend-lost error when the backend does not answer. */
  check(): Promise<void>;
  /** Called once, after the backend's sandbox was terminated. */
  released(): void;
}

export class FleetSandbox implements Sandbox {
  readonly id: string;
  readonly provider: string;
  readonly workdir: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly capabilities: SandboxCapabilities;
  /** The backend it runs on. */
  readonly backend: string;
  readonly #inner: Sandbox;
  readonly #host: FleetSandboxHost;
  #terminated: Promise<void> | undefined;

  constructor(inner: Sandbox, host: FleetSandboxHost) {
    this.#inner = inner;
    this.#host = host;
    this.id = inner.id;
    this.provider = inner.provider;
    this.workdir = inner.workdir;
    this.labels = inner.labels;
    this.capabilities = inner.capabilities;
    this.backend = host.backend;
  }

  async #op<T>(options: OpOptions | undefined, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const lost = this.#host.lostSignal();
    if (lost.aborted) throw lost.reason;
    const signal = options?.signal ? AbortSignal.any([options.signal, lost]) : lost;
    try {
      return await fn(signal);
    } catch (error) {
      if (options?.signal?.aborted) throw error;
      throw await this.#host.classify(this.id, error);
    }
  }

  async exec(command: string | readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
    const result = await this.#op(options, (signal) => this.#inner.exec(command, { ...options, signal }));
    // A command killed by a signal may have been killed by its backend going down (an engine stopping its
    // containers): that is no result of the command, so the backend is asked before it is returned.
    if (result.exitCode !== null && result.exitCode >= 128) await this.#host.check();
    return result;
  }

  writeFile(
    path: string,
    content: string | Uint8Array,
    options: OpOptions & { mode?: number | undefined } = {},
  ): Promise<void> {
    return this.#op(options, (signal) => this.#inner.writeFile(path, content, { ...options, signal }));
  }

  readFile(path: string, options: ReadOptions = {}): Promise<Uint8Array> {
    return this.#op(options, (signal) => this.#inner.readFile(path, { ...options, signal }));
  }

  readTextFile(path: string, options: ReadOptions = {}): Promise<string> {
    return this.#op(options, (signal) => this.#inner.readTextFile(path, { ...options, signal }));
  }

  copyIn(hostDir: string, path: string, options: OpOptions = {}): Promise<void> {
    return this.#op(options, (signal) => this.#inner.copyIn(hostDir, path, { ...options, signal }));
  }

  isAlive(options: OpOptions = {}): Promise<boolean> {
    if (this.#host.lostSignal().aborted) return Promise.resolve(false);
    return this.#inner.isAlive(options);
  }

  terminate(): Promise<void> {
    this.#terminated ??= this.#inner.terminate().finally(() => this.#host.released());
    return this.#terminated;
  }
}
