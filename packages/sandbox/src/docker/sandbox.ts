/**
 * One Docker sandbox: a container run through the Engine API. Execs are create + attached start + inspect,
 * with the timeout enforced inside the container; files move through the archive endpoints, read-backs
 * capped; terminate removes the container (and, at process exit, a short-lived child process does).
 */
import { execFileSync, spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { ConfigError, SandboxError } from '@vime/core';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, decodeUtf8 } from '@vime/core/utils';
import { sandboxPath } from '../host/sandbox.js';
import { register } from '../lifecycle.js';
import { SandboxOps } from '../ops.js';
import { readCap, tailOf, tooLarge } from '../output.js';
import { EXEC_MARKER_ENV, KILL_MARKED, killByExecMarker, newExecId } from '../process-markers.js';
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
import type { DockerEngine } from './engine-api.js';

export interface DockerSandboxInit {
  id: string;
  containerId: string;
  dropExitHook: () => void;
  engine: DockerEngine;
  workdir: string;
  labels: Record<string, string>;
  owner: { uid: number; gid: number };
  events: SandboxEmitter;
  handleSignals: boolean;
  lifetimeMs?: number | undefined;
}

/** Room for the tar headers around one file's content. */
const TAR_OVERHEAD = 64 << 10;

/** The engine's `X-Docker-Container-Path-Stat` header: base64 JSON of the path's stat. */
function parsePathStat(
  header: string | string[] | undefined,
): { size: number; mode: number; linkTarget: string } | undefined {
  if (typeof header !== 'string') return undefined;
  try {
    const v = JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as {
      size?: number | undefined;
      mode?: number | undefined;
      linkTarget?: string | undefined;
    };
    return { size: Number(v.size ?? 0), mode: Number(v.mode ?? 0), linkTarget: v.linkTarget ?? '' };
  } catch {
    return undefined;
  }
}

const WITH_STDIN = 'f=$1; shift; "$@" < "$f"; rc=$?; rm -f "$f"; exit $rc';

export class DockerSandbox implements Sandbox {
  readonly id: string;
  readonly provider = 'docker';
  readonly workdir: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly capabilities: SandboxCapabilities = { persistentProcesses: true, isolatedNetwork: true };
  readonly containerId: string;
  private readonly engine: DockerEngine;
  private readonly owner: { uid: number; gid: number };
  private readonly events: SandboxEmitter;
  private readonly dropExitHook: () => void;
  private readonly ops: SandboxOps;

  constructor(init: DockerSandboxInit) {
    this.id = init.id;
    this.dropExitHook = init.dropExitHook;
    this.containerId = init.containerId;
    this.engine = init.engine;
    this.workdir = init.workdir;
    this.labels = init.labels;
    this.owner = init.owner;
    this.events = init.events;
    const unregister = register(this, {
      handleSignals: init.handleSignals,
      lifetimeMs: init.lifetimeMs,
    });
    this.ops = new SandboxOps({ id: this.id, provider: this.provider, events: this.events, unregister });
  }

  /** Create and run one exec to completion, demultiplexing its output. */
  private async runExec(
    cmd: string[],
    options: {
      env?: Record<string, string> | undefined;
      cwd?: string | undefined;
      maxOutputBytes?: number | undefined;
      signal?: AbortSignal | undefined;
    },
  ): Promise<{
    exitCode: number | null;
    stdout: BoundedOutput;
    stderr: BoundedOutput;
    merged: BoundedOutput;
  }> {
    const max = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const stdout = new BoundedOutput(max);
    const stderr = new BoundedOutput(max);
    const merged = new BoundedOutput(max);
    const { Id } = await this.engine.json<{ Id: string }>('POST', `/containers/${this.containerId}/exec`, {
      json: {
        AttachStdin: false,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
        Cmd: cmd,
        Env: Object.entries(options.env ?? {}).map(([k, v]) => `${k}=${v}`),
        WorkingDir: options.cwd ?? this.workdir,
      },
      signal: options.signal,
    });
    await this.engine.attachExec(
      Id,
      (stream, payload) => {
        (stream === 2 ? stderr : stdout).push(payload);
        merged.push(payload);
      },
      options.signal,
    );
    const inspect = await this.engine.json<{ ExitCode: number | null; Running: boolean }>(
      'GET',
      `/exec/${Id}/json`,
      { signal: options.signal },
    );
    return { exitCode: inspect.Running ? null : inspect.ExitCode, stdout, stderr, merged };
  }

  /** Kill every process of one exec, including `setsid`-detached ones, by its environment marker. */
  private async killMarked(execId: string): Promise<void> {
    // A local engine's containers are visible in the host's /proc: kill from here first, which works even
    // when the container has no pids left to start the in-container killer (a fork bomb).
    for (let pass = 0; pass < 3; pass++) killByExecMarker(execId);
    await this.runExec(['sh', '-c', KILL_MARKED, 'sh', EXEC_MARKER_ENV, execId], {
      signal: AbortSignal.timeout(15_000),
    }).catch(() => {});
  }

  async exec(command: string | readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
    const result = await this.ops.track(options, async (signal) => {
      const started = performance.now();
      const execId = newExecId();
      let argv = typeof command === 'string' ? ['sh', '-c', command] : [...command];
      if (argv.length === 0) throw new SandboxError('exec needs a command', { code: 'invalid_argument' });
      if (options.timeoutMs !== undefined) {
        argv = ['timeout', '-s', 'KILL', (Math.max(1, options.timeoutMs) / 1000).toFixed(3), ...argv];
      }
      if (options.stdin !== undefined) {
        // Not under /tmp: the archive endpoint writes to the container's layer, under the /tmp tmpfs.
        const file = `/.vime-stdin/${execId}`;
        await this.engine.request('PUT', `/containers/${this.containerId}/archive`, {
          query: { path: '/' },
          body: packTar([
            { name: '.vime-stdin', type: 'dir', mode: 0o700, ...this.owner },
            { name: file.slice(1), type: 'file', content: options.stdin, mode: 0o600, ...this.owner },
          ]),
          contentType: 'application/x-tar',
          signal,
        });
        argv = ['sh', '-c', WITH_STDIN, 'sh', file, ...argv];
      }
      let run: Awaited<ReturnType<DockerSandbox['runExec']>>;
      try {
        run = await this.runExec(argv, {
          env: { ...options.env, [EXEC_MARKER_ENV]: execId },
          cwd: sandboxPath(this.workdir, options.cwd ?? this.workdir),
          maxOutputBytes: options.maxOutputBytes,
          signal,
        });
      } catch (error) {
        // The process keeps running in the container when only our connection goes away.
        if (signal.aborted && !this.ops.terminating) await this.killMarked(execId);
        throw error;
      }
      const durationMs = performance.now() - started;
      const timedOut =
        options.timeoutMs !== undefined && run.exitCode === 137 && durationMs >= options.timeoutMs;
      if (timedOut) await this.killMarked(execId);
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
    this.events.emit('exec', {
      id: this.id,
      provider: 'docker',
      durationMs: result.durationMs,
      exitCode: result.exitCode,
      timedOut: result.timedOut,
    });
    return result;
  }

  private async mkdirs(dir: string, signal: AbortSignal): Promise<void> {
    const r = await this.runExec(['mkdir', '-p', '--', dir], { signal });
    if (r.exitCode !== 0) {
      throw new SandboxError(
        `cannot create ${dir} in sandbox ${this.id}: ${tailOf(r.stderr.text().trim(), 500)}`,
      );
    }
  }

  /** PUT an archive into `dir`, creating `dir` first when the engine says it is missing. */
  private async putArchive(dir: string, body: () => Buffer | NodeJS.ReadableStream, signal: AbortSignal) {
    const put = () =>
      this.engine.request('PUT', `/containers/${this.containerId}/archive`, {
        query: { path: dir },
        body: body() as Buffer,
        contentType: 'application/x-tar',
        signal,
      });
    try {
      await put();
    } catch (error) {
      if (!(SandboxError.isInstance(error) && error.code === 'not_found')) throw error;
      await this.mkdirs(dir, signal);
      await put();
    }
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options: OpOptions & { mode?: number | undefined } = {},
  ): Promise<void> {
    const target = sandboxPath(this.workdir, path);
    await this.ops.track(options, (signal) =>
      this.putArchive(
        posix.dirname(target),
        () =>
          packTar([
            {
              name: posix.basename(target),
              type: 'file',
              content,
              mode: options.mode ?? 0o644,
              ...this.owner,
            },
          ]),
        signal,
      ),
    );
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<Uint8Array> {
    const cap = readCap(options.maxBytes);
    return this.ops.track(options, async (signal) => {
      let target = sandboxPath(this.workdir, path);
      for (let hops = 0; hops < 16; hops++) {
        const query = { path: target };
        // The engine's stat first (size, type, link target), so a large file is refused before it is read.
        const head = await this.engine
          .request('HEAD', `/containers/${this.containerId}/archive`, { query, signal })
          .catch((error: unknown) => {
            if (!(SandboxError.isInstance(error) && error.code === 'not_found')) throw error;
            throw new SandboxError(`readFile ${target} in sandbox ${this.id}: no such file`, {
              code: 'not_found',
              cause: error,
            });
          });
        const stat = parsePathStat(head.headers['x-docker-container-path-stat']);
        if (stat?.linkTarget) {
          target = posix.resolve(posix.dirname(target), stat.linkTarget);
          continue;
        }
        if (stat && stat.mode >= 2 ** 31) {
          throw new SandboxError(`readFile ${target} in sandbox ${this.id}: not a regular file`, {
            code: 'invalid_argument',
          });
        }
        if (stat && stat.size > cap) throw tooLarge(target, this.id, cap, stat.size);
        let res: Awaited<ReturnType<DockerEngine['request']>>;
        try {
          res = await this.engine.request('GET', `/containers/${this.containerId}/archive`, {
            query,
            signal,
            maxBytes: cap + TAR_OVERHEAD,
          });
        } catch (error) {
          if (SandboxError.isInstance(error) && error.code === 'response_too_large')
            throw tooLarge(target, this.id, cap);
          throw error;
        }
        const entry = unpackTar(res.body)[0];
        if (entry?.type === 'file') {
          if (entry.content.length > cap) throw tooLarge(target, this.id, cap, entry.content.length);
          return new Uint8Array(entry.content);
        }
        if (entry?.type !== 'symlink') {
          throw new SandboxError(`readFile ${target} in sandbox ${this.id}: not a regular file`, {
            code: 'invalid_argument',
          });
        }
        target = posix.resolve(posix.dirname(target), entry.linkname);
      }
      throw new SandboxError(`readFile ${path} in sandbox ${this.id}: too many symlinks`);
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
    await this.ops.track(options, async (signal) => {
      await this.mkdirs(target, signal);
      const tar = spawn(
        'tar',
        [
          '-C',
          hostDir,
          `--owner=${this.owner.uid}`,
          `--group=${this.owner.gid}`,
          '--numeric-owner',
          '-cf',
          '-',
          '.',
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let tarErr = '';
      tar.stderr.on('data', (d: Buffer) => {
        tarErr += d.toString();
      });
      const tarExit = new Promise<number | null>((resolve) => tar.once('close', resolve));
      try {
        await this.engine.request('PUT', `/containers/${this.containerId}/archive`, {
          query: { path: target },
          body: tar.stdout,
          contentType: 'application/x-tar',
          signal,
        });
      } catch (error) {
        tar.kill('SIGKILL');
        throw error;
      }
      if ((await tarExit) !== 0)
        throw new SandboxError(`copyIn: packing ${hostDir} failed: ${tarErr.trim()}`);
    });
  }

  async isAlive(options: OpOptions = {}): Promise<boolean> {
    if (this.ops.terminating) return false;
    try {
      const info = await this.engine.json<{ State?: { Running?: boolean | undefined } | undefined }>(
        'GET',
        `/containers/${this.containerId}/json`,
        { signal: options.signal },
      );
      return info.State?.Running === true;
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
      async () => {
        await this.engine.request('DELETE', `/containers/${this.containerId}`, {
          query: { force: true, v: true },
          ok: [404],
          signal: AbortSignal.timeout(60_000),
        });
        this.dropExitHook();
      },
      `removing container of sandbox ${this.id} failed`,
    );
  }
}

export /** At process exit nothing async runs: remove a container (by id or name) from a short-lived child process. */
function removeContainerSync(socketPath: string, container: string): void {
  const script =
    "const r=require('http').request({socketPath:process.argv[1],method:'DELETE',path:process.argv[2]},s=>{s.resume();s.on('end',()=>process.exit(0))});r.on('error',()=>process.exit(1));r.end()";
  try {
    execFileSync(process.execPath, ['-e', script, socketPath, `/containers/${container}?force=true&v=true`], {
      stdio: 'ignore',
      timeout: 10_000,
    });
  } catch {
    // the reaper catches what is left
  }
}
