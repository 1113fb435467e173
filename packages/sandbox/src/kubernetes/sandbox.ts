/**
 * One Kubernetes sandbox: a running pod (created directly, or claimed through agent-sandbox) whose
 * commands run through the `exec` subresource. The API's exec has no working directory, environment or
 * timeout of its own, so each command runs under a small `sh` prelude that sets them; a timeout is enforced
 * inside the pod (`timeout -s KILL`), then every process of that exec is killed by its environment marker,
 * because closing an exec's connection does not stop its command. Files move as tar over exec, as
 * `kubectl cp` does.
 */
import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
import { ConfigError, SandboxError } from '@vime/core';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, deadlineSignal, decodeUtf8 } from '@vime/core/utils';
import { sandboxPath } from '../host/sandbox.js';
import { register } from '../lifecycle.js';
import { SandboxOps } from '../ops.js';
import { readCap, tailOf, tooLarge } from '../output.js';
import { EXEC_MARKER_ENV, KILL_MARKED, newExecId } from '../process-markers.js';
import { packTar, unpackTar } from '../tar.js';
import type {
  ExecOptions,
  ExecResult,
  OpOptions,
  ReadOptions,
  Sandbox,
  SandboxCapabilities,
  SandboxEmitter,
  TerminateReason,
} from '../types.js';
import { podExec } from './exec.js';

/**
 * The prelude of every command: `sh -c PRELUDE sh CWD [NAME=VALUE | -FLAG N]... -- ARGV...` enters the
 * work dir, exports the variables, sets the per-process limits, and execs the command.
 */
const PRELUDE =
  'cd -- "$1" || exit 126; shift; while [ "$1" != -- ]; do case "$1" in -?) ulimit "$1" "$2" || exit 126; shift ;; *) export "$1" ;; esac; shift; done; shift; exec "$@"';
/** Checks a file before it is read back: 44 missing, 45 not a regular file, 46 over the cap (size on stdout). */
const READ_FILE =
  'f=$1; [ -e "$f" ] || exit 44; [ -f "$f" ] || exit 45; s=$(wc -c < "$f"); [ "$s" -le "$2" ] || { echo "$s"; exit 46; }; exec tar -chf - -C "$(dirname -- "$f")" -- "$(basename -- "$f")"';
/** Unpacks a tar from stdin into a folder, created first, owned by the extracting (sandbox) user. */
const UNPACK = 'mkdir -p -- "$1" && exec tar -xmof - -C "$1"';
/** How long after an exec's timeout its processes are killed by marker, if its status has not come. */
const KILL_GRACE_MS = 1000;
/** Room for the tar headers around one file's content. */
const TAR_OVERHEAD = 64 << 10;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface KubernetesSandboxInit {
  id: string;
  kc: KubeConfig;
  namespace: string;
  pod: string;
  container: string;
  workdir: string;
  labels: Record<string, string>;
  /** `ulimit` flags and values applied to every command (the limits Kubernetes has no field for). */
  ulimits: ReadonlyArray<readonly [string, number]>;
  events: SandboxEmitter;
  handleSignals: boolean;
  lifetimeMs?: number | undefined;
  /** Whether the pod still runs (read from the API). */
  running: (signal?: AbortSignal) => Promise<boolean>;
  /** Deletes what backs the sandbox: the pod, or the agent-sandbox claim. */
  release: () => Promise<void>;
}

/** A sandbox in a Kubernetes pod (its own, or a claimed agent-sandbox's); see the package README's "Kubernetes". */
export class KubernetesSandbox implements Sandbox {
  readonly id: string;
  readonly provider = 'kubernetes';
  readonly workdir: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly capabilities: SandboxCapabilities = { persistentProcesses: true, isolatedNetwork: false };
  /** The pod the commands run in. */
  readonly pod: string;
  readonly namespace: string;
  readonly #init: KubernetesSandboxInit;
  readonly #ops: SandboxOps;

  constructor(init: KubernetesSandboxInit) {
    this.#init = init;
    this.id = init.id;
    this.pod = init.pod;
    this.namespace = init.namespace;
    this.workdir = init.workdir;
    this.labels = init.labels;
    const unregister = register(this, { handleSignals: init.handleSignals, lifetimeMs: init.lifetimeMs });
    this.#ops = new SandboxOps({ id: this.id, provider: this.provider, events: init.events, unregister });
  }

  /** Run an argv in the pod as it is (no prelude), its output bounded. */
  private async run(
    argv: readonly string[],
    options: { stdin?: Uint8Array | Readable | undefined; max?: number | undefined; signal: AbortSignal },
  ): Promise<{ exitCode: number; stdout: BoundedOutput; stderr: BoundedOutput; merged: BoundedOutput }> {
    const max = options.max ?? DEFAULT_MAX_OUTPUT_BYTES;
    const stdout = new BoundedOutput(max);
    const stderr = new BoundedOutput(max);
    const merged = new BoundedOutput(max);
    const { exitCode } = await podExec(
      this.#init.kc,
      { namespace: this.namespace, pod: this.pod, container: this.#init.container },
      argv,
      {
        stdout: (c) => {
          stdout.push(c);
          merged.push(c);
        },
        stderr: (c) => {
          stderr.push(c);
          merged.push(c);
        },
      },
      { stdin: options.stdin, signal: options.signal },
    );
    return { exitCode, stdout, stderr, merged };
  }

  /** Kill every process of one exec (detached ones included) by its environment marker. */
  private async killMarked(execId: string): Promise<void> {
    await this.run(['sh', '-c', KILL_MARKED, 'sh', EXEC_MARKER_ENV, execId], {
      signal: AbortSignal.timeout(30_000),
    }).catch(() => {});
  }

  async exec(command: string | readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
    const result = await this.#ops.track(options, async (signal) => {
      const started = performance.now();
      const execId = newExecId();
      let argv = typeof command === 'string' ? ['sh', '-c', command] : [...command];
      if (argv.length === 0) throw new SandboxError('exec needs a command', { code: 'invalid_argument' });
      for (const name of Object.keys(options.env ?? {})) {
        if (!ENV_NAME.test(name)) {
          throw new ConfigError(
            `exec env: ${JSON.stringify(name)} is not a shell variable name ([A-Za-z_][A-Za-z0-9_]*)`,
          );
        }
      }
      const { timeoutMs } = options;
      if (timeoutMs !== undefined)
        argv = ['timeout', '-s', 'KILL', (Math.max(1, timeoutMs) / 1000).toFixed(3), ...argv];
      const cwd = sandboxPath(this.workdir, options.cwd ?? this.workdir);
      const env = Object.entries({ ...options.env, [EXEC_MARKER_ENV]: execId }).map(([k, v]) => `${k}=${v}`);
      const limits = this.#init.ulimits.flatMap(([flag, value]) => [flag, String(value)]);
      // The pod enforces the timeout; this bound (a multiple of it) only covers a connection that hangs.
      const hang = timeoutMs === undefined ? undefined : deadlineSignal(2 * timeoutMs + 30_000, signal);
      const bound = hang?.signal ?? signal;
      // A detached child holding the exec's stdout keeps its stream (and so its status) from ending after
      // the in-pod timeout killed the command: a moment later every process of the exec is killed by marker.
      let killing: Promise<void> | undefined;
      const killer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              killing = this.killMarked(execId);
            }, timeoutMs + KILL_GRACE_MS);
      let run: Awaited<ReturnType<KubernetesSandbox['run']>>;
      try {
        run = await this.run(['sh', '-c', PRELUDE, 'sh', cwd, ...env, ...limits, '--', ...argv], {
          stdin: options.stdin === undefined ? undefined : Buffer.from(options.stdin),
          max: options.maxOutputBytes,
          signal: bound,
        });
      } catch (error) {
        if (!bound.aborted || this.#ops.terminating) throw error;
        await this.killMarked(execId);
        if (signal.aborted) throw signal.reason;
        run = {
          exitCode: 137,
          stdout: new BoundedOutput(1),
          stderr: new BoundedOutput(1),
          merged: new BoundedOutput(1),
        };
      } finally {
        clearTimeout(killer);
        hang?.clear();
      }
      const durationMs = performance.now() - started;
      const timedOut = timeoutMs !== undefined && run.exitCode === 137 && durationMs >= timeoutMs;
      if (timedOut) await (killing ?? this.killMarked(execId));
      return {
        exitCode: timedOut ? null : run.exitCode,
        stdout: run.stdout.text(),
        stderr: run.stderr.text(),
        output: run.merged.text(),
        timedOut,
        truncated: run.stdout.truncated || run.stderr.truncated || run.merged.truncated,
        durationMs,
      };
    });
    this.#init.events.emit('exec', {
      id: this.id,
      provider: this.provider,
      durationMs: result.durationMs,
      exitCode: result.exitCode,
      timedOut: result.timedOut,
    });
    return result;
  }

  /** Unpack a tar (bytes or a stream) into a folder of the pod. */
  private async unpack(dir: string, tar: Uint8Array | Readable, signal: AbortSignal): Promise<void> {
    const r = await this.run(['sh', '-c', UNPACK, 'sh', dir], { stdin: tar, signal, max: 64 << 10 });
    if (r.exitCode !== 0) {
      throw new SandboxError(
        `cannot unpack into ${dir} in sandbox ${this.id} (exit ${r.exitCode}): ${tailOf(r.stderr.text().trim(), 500)}`,
      );
    }
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options: OpOptions & { mode?: number | undefined } = {},
  ): Promise<void> {
    const target = sandboxPath(this.workdir, path);
    const tar = packTar([
      { name: posix.basename(target), type: 'file', content, mode: options.mode ?? 0o644 },
    ]);
    await this.#ops.track(options, (signal) => this.unpack(posix.dirname(target), tar, signal));
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<Uint8Array> {
    const cap = readCap(options.maxBytes);
    const target = sandboxPath(this.workdir, path);
    return this.#ops.track(options, async (signal) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const stderr = new BoundedOutput(4096);
      const local = new AbortController();
      const both = AbortSignal.any([signal, local.signal]);
      let exitCode: number;
      try {
        ({ exitCode } = await podExec(
          this.#init.kc,
          { namespace: this.namespace, pod: this.pod, container: this.#init.container },
          ['sh', '-c', READ_FILE, 'sh', target, String(cap)],
          {
            stdout: (c) => {
              size += c.length;
              // The file grew past the cap between the check and the read.
              if (size > cap + TAR_OVERHEAD) local.abort(tooLarge(target, this.id, cap));
              else chunks.push(c);
            },
            stderr: (c) => stderr.push(c),
          },
          { signal: both },
        ));
      } catch (error) {
        if (local.signal.aborted && !signal.aborted) throw local.signal.reason;
        throw error;
      }
      const out = Buffer.concat(chunks);
      if (exitCode === 44) {
        throw new SandboxError(`readFile ${target} in sandbox ${this.id}: no such file`, {
          code: 'not_found',
        });
      }
      if (exitCode === 45) {
        throw new SandboxError(`readFile ${target} in sandbox ${this.id}: not a regular file`, {
          code: 'invalid_argument',
        });
      }
      if (exitCode === 46) throw tooLarge(target, this.id, cap, Number(out.toString().trim()));
      if (exitCode !== 0) {
        throw new SandboxError(
          `readFile ${target} in sandbox ${this.id} (exit ${exitCode}): ${stderr.text().trim()}`,
        );
      }
      const entry = unpackTar(out)[0];
      if (entry?.type !== 'file') {
        throw new SandboxError(`readFile ${target} in sandbox ${this.id}: not a regular file`, {
          code: 'invalid_argument',
        });
      }
      if (entry.content.length > cap) throw tooLarge(target, this.id, cap, entry.content.length);
      return new Uint8Array(entry.content);
    });
  }

  async readTextFile(path: string, options: ReadOptions = {}): Promise<string> {
    return decodeUtf8(await this.readFile(path, options));
  }

  async copyIn(hostDir: string, path: string, options: OpOptions = {}): Promise<void> {
    const st = await stat(hostDir).catch(() => undefined);
    if (!st?.isDirectory())
      throw new ConfigError(`copyIn hostDir: ${JSON.stringify(hostDir)} is not a folder`);
    const target = sandboxPath(this.workdir, path);
    await this.#ops.track(options, async (signal) => {
      const tar = spawn('tar', ['-C', hostDir, '-cf', '-', '.'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let tarErr = '';
      tar.stderr.on('data', (d: Buffer) => {
        tarErr += d.toString();
      });
      const tarExit = new Promise<number | null>((resolve) => tar.once('close', resolve));
      // Piped at once: a child's stdout that nothing reads is drained and lost when the child exits, and
      // a small folder's tar can be done before the exec's connection is open.
      const archive = tar.stdout.pipe(new PassThrough());
      try {
        await this.unpack(target, archive, signal);
      } catch (error) {
        tar.kill('SIGKILL');
        throw error;
      }
      if ((await tarExit) !== 0)
        throw new SandboxError(`copyIn: packing ${hostDir} failed: ${tarErr.trim()}`);
    });
  }

  async isAlive(options: OpOptions = {}): Promise<boolean> {
    if (this.#ops.terminating) return false;
    return this.#init.running(options.signal).catch(() => false);
  }

  terminate(): Promise<void> {
    return this.terminateWith('requested');
  }

  /** Terminate, recording why (`requested`, `lifetime`, a signal, …) on the `terminate` event. */
  terminateWith(reason: TerminateReason): Promise<void> {
    return this.#ops.terminate(
      reason,
      this.#init.release,
      `deleting pod ${this.namespace}/${this.pod} of sandbox ${this.id} failed`,
    );
  }
}
