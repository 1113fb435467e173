/**
 * `docker`: one container per sandbox through the Docker Engine REST API (or Podman's compatible
 * service): no network, all capabilities dropped, no-new-privileges, a non-root user, memory/pids/CPU
 * limits, files moved with the archive endpoints. Timeouts are enforced inside the container, because
 * dropping an attached exec's HTTP connection does not stop the process there.
 */
import { execFileSync, spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { ConfigError, SandboxError } from '@vime/core';
import { EventEmitter } from 'eventemitter3';
import { DockerEngine } from './docker-engine.js';
import { sandboxPath } from './host-sandbox.js';
import {
  forwardWarnings,
  newSandboxId,
  onProcessExit,
  register,
  runOf,
  sandboxLabels,
  withTrackedCreate,
} from './lifecycle.js';
import { type EffectiveLimits, resolveLimits, resolveWorkdir } from './limits.js';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, decodeUtf8, readCap, tailOf, tooLarge } from './output.js';
import { EXEC_MARKER_ENV, killByExecMarker, newExecId } from './proc.js';
import { packTar, unpackTar } from './tar.js';
import type {
  ExecOptions,
  ExecResult,
  Logger,
  OpOptions,
  ReadOptions,
  Sandbox,
  SandboxCapabilities,
  SandboxEmitter,
  SandboxProvider,
  SandboxSpec,
  TerminateReason,
} from './types.js';

/** Image label saying "bind the host's /usr read-only" (a registry-free image holding only folder stubs). */
export const HOST_USR_LABEL = 'dev.vime.host-usr';
export const DEFAULT_DOCKER_IMAGE = 'vime/sandbox-base:latest';

export interface DockerUlimit {
  Name: string;
  Soft: number;
  Hard: number;
}

export interface DockerProviderOptions {
  /** Engine socket (default: `DOCKER_HOST`'s unix socket, else /var/run/docker.sock). */
  socketPath?: string;
  /** Share one engine client between providers. */
  engine?: DockerEngine;
  /** Image when the spec names none (default `vime/sandbox-base:latest`). Images are never pulled. */
  defaultImage?: string;
  /** Container user (default `1000:1000`). */
  user?: string;
  /** PATH inside the container (default `/usr/local/bin:/usr/bin:/bin`). */
  path?: string;
  /**
   * Ulimits for every container (default nofile 4096). Rootful Podman on hosts whose root lacks
   * CAP_SYS_RESOURCE also needs `{ Name: 'nproc', Soft: 4096, Hard: 4096 }`.
   */
  ulimits?: DockerUlimit[];
  /** Extra `HostConfig` fields merged over the defaults (e.g. `Runtime: 'runsc'`). */
  hostConfig?: Record<string, unknown>;
  events?: SandboxEmitter;
  logger?: Logger;
  /** Terminate live sandboxes on SIGINT/SIGTERM/SIGHUP and exit (default true). */
  handleSignals?: boolean;
}

interface ImageInfo {
  hostUsr: boolean;
}

function parseUser(user: string): { uid: number; gid: number } {
  if (user === 'root') return { uid: 0, gid: 0 };
  const [u, g] = user.split(':');
  const uid = Number(u);
  const gid = g === undefined ? uid : Number(g);
  if (!Number.isInteger(uid) || !Number.isInteger(gid)) {
    throw new ConfigError(
      `dockerProvider user must be numeric "uid:gid" (got ${JSON.stringify(user)}), e.g. "1000:1000"`,
    );
  }
  return { uid, gid };
}

export function dockerProvider(options: DockerProviderOptions = {}): SandboxProvider {
  const events = options.events ?? (new EventEmitter() as SandboxEmitter);
  forwardWarnings(events, options.logger);
  const engine = options.engine ?? new DockerEngine(options.socketPath);
  const user = options.user ?? '1000:1000';
  const owner = parseUser(user);
  const path = options.path ?? '/usr/local/bin:/usr/bin:/bin';
  const images = new Map<string, Promise<ImageInfo>>();

  const imageInfo = (image: string, signal?: AbortSignal): Promise<ImageInfo> => {
    let info = images.get(image);
    if (!info) {
      info = engine
        .json<{ Config?: { Labels?: Record<string, string> | null } }>(
          'GET',
          `/images/${encodeURIComponent(image)}/json`,
          { signal },
        )
        .then((res) => ({ hostUsr: res.Config?.Labels?.[HOST_USR_LABEL] === 'true' }))
        .catch((error) => {
          images.delete(image);
          if (SandboxError.isInstance(error) && error.code === 'not_found') {
            throw new SandboxError(
              `image ${JSON.stringify(image)} is not present in the engine at ${engine.socketPath}; ` +
                'dockerProvider never pulls: build or import it first (scripts/docker-up.sh imports vime/sandbox-base:latest)',
              { cause: error, code: 'image_not_found' },
            );
          }
          throw error;
        });
      images.set(image, info);
    }
    return info;
  };

  return withTrackedCreate(
    {
      name: 'docker',
      events,
      async create(spec: SandboxSpec, op: OpOptions = {}): Promise<Sandbox> {
        const { signal } = op;
        signal?.throwIfAborted();
        const started = performance.now();
        const workdir = resolveWorkdir(spec?.workdir);
        const limits = resolveLimits(spec.limits);
        const image = spec.image ?? options.defaultImage ?? DEFAULT_DOCKER_IMAGE;
        const info = await imageInfo(image, signal);
        const id = newSandboxId(runOf(spec.labels));
        const labels = sandboxLabels(id, spec.labels);
        if (spec.lifetimeMs !== undefined) labels['vime.lifetime-ms'] = String(spec.lifetimeMs);
        const name = `vime-${id}`;
        // From here an exit at any step removes the container (by name: it may not be created yet).
        const dropExitHook = onProcessExit(() => removeContainerSync(engine.socketPath, name));
        const body = {
          Image: image,
          Cmd: ['sleep', 'infinity'],
          Entrypoint: [],
          User: user,
          WorkingDir: workdir,
          Env: Object.entries({ PATH: path, HOME: workdir, LANG: 'C.UTF-8', ...spec.env }).map(
            ([k, v]) => `${k}=${v}`,
          ),
          Labels: labels,
          Hostname: 'sandbox',
          NetworkDisabled: true,
          HostConfig: {
            NetworkMode: 'none',
            Init: true,
            CapDrop: ['ALL'],
            SecurityOpt: ['no-new-privileges'],
            Binds: info.hostUsr ? ['/usr:/usr:ro'] : [],
            ...dockerLimits(limits, options.ulimits),
            ...options.hostConfig,
          },
        };
        const remove = () =>
          engine
            .request('DELETE', `/containers/${name}`, {
              query: { force: true, v: true },
              ok: [404],
              signal: AbortSignal.timeout(60_000),
            })
            .then(dropExitHook, () => {});
        let containerId: string;
        try {
          // Not aborted midway: an engine finishes a create whose client went away, and the container must
          // then be known to be removed. The abort is honoured right after.
          const created = await engine.json<{ Id: string; Warnings?: string[] | null }>(
            'POST',
            '/containers/create',
            {
              query: { name },
              json: body,
              signal: AbortSignal.timeout(120_000),
            },
          );
          containerId = created.Id;
          for (const w of created.Warnings ?? []) {
            events.emit('warning', { message: `docker: ${w}`, code: 'limit_not_enforced', data: { image } });
          }
          signal?.throwIfAborted();
          // The work dir exists before start, owned by the sandbox user (CapDrop ALL forbids chown later).
          await engine.request('PUT', `/containers/${containerId}/archive`, {
            query: { path: '/' },
            body: packTar([{ name: workdir.slice(1), type: 'dir', mode: 0o755, ...owner }]),
            contentType: 'application/x-tar',
            signal,
          });
          await engine.request('POST', `/containers/${containerId}/start`, { signal });
        } catch (error) {
          await remove();
          throw error;
        }
        const sandbox = new DockerSandbox({
          id,
          containerId,
          dropExitHook,
          engine,
          workdir,
          labels,
          owner,
          events,
          handleSignals: options.handleSignals ?? true,
          ...(spec.lifetimeMs === undefined ? {} : { lifetimeMs: spec.lifetimeMs }),
        });
        events.emit('create', { id, provider: 'docker', labels, durationMs: performance.now() - started });
        return sandbox;
      },
    },
    options.handleSignals ?? true,
  );
}

interface DockerSandboxInit {
  id: string;
  containerId: string;
  dropExitHook: () => void;
  engine: DockerEngine;
  workdir: string;
  labels: Record<string, string>;
  owner: { uid: number; gid: number };
  events: SandboxEmitter;
  handleSignals: boolean;
  lifetimeMs?: number;
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
      size?: number;
      mode?: number;
      linkTarget?: string;
    };
    return { size: Number(v.size ?? 0), mode: Number(v.mode ?? 0), linkTarget: v.linkTarget ?? '' };
  } catch {
    return undefined;
  }
}

const KILL_MARKED =
  'cd /proc && for pass in 1 2 3; do for p in [0-9]*; do if grep -qz "^$1=$2\\$" "$p/environ" 2>/dev/null; then kill -9 "$p" 2>/dev/null; fi; done; done; true';
const WITH_STDIN = 'f=$1; shift; "$@" < "$f"; rc=$?; rm -f "$f"; exit $rc';

class DockerSandbox implements Sandbox {
  readonly id: string;
  readonly provider = 'docker';
  readonly workdir: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly capabilities: SandboxCapabilities = { persistentProcesses: true, isolatedNetwork: true };
  readonly containerId: string;
  private readonly engine: DockerEngine;
  private readonly owner: { uid: number; gid: number };
  private readonly events: SandboxEmitter;
  private readonly unregister: () => void;
  private readonly dropExitHook: () => void;
  private readonly running = new Set<AbortController>();
  private terminating: Promise<void> | undefined;

  constructor(init: DockerSandboxInit) {
    this.id = init.id;
    this.dropExitHook = init.dropExitHook;
    this.containerId = init.containerId;
    this.engine = init.engine;
    this.workdir = init.workdir;
    this.labels = init.labels;
    this.owner = init.owner;
    this.events = init.events;
    this.unregister = register(this, {
      handleSignals: init.handleSignals,
      ...(init.lifetimeMs === undefined ? {} : { lifetimeMs: init.lifetimeMs }),
    });
  }

  private async track<T>(options: OpOptions, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (this.terminating) {
      throw new SandboxError(`sandbox ${this.id} was terminated; claim or create a new one`, {
        code: 'sandbox_terminated',
      });
    }
    const controller = new AbortController();
    this.running.add(controller);
    const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
    try {
      return await fn(signal);
    } finally {
      this.running.delete(controller);
    }
  }

  /** Create and run one exec to completion, demultiplexing its output. */
  private async runExec(
    cmd: string[],
    options: { env?: Record<string, string>; cwd?: string; maxOutputBytes?: number; signal?: AbortSignal },
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
    const result = await this.track(options, async (signal) => {
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
          ...(options.maxOutputBytes === undefined ? {} : { maxOutputBytes: options.maxOutputBytes }),
          signal,
        });
      } catch (error) {
        // The process keeps running in the container when only our connection goes away.
        if (signal.aborted && !this.terminating) await this.killMarked(execId);
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
    options: OpOptions & { mode?: number } = {},
  ): Promise<void> {
    const target = sandboxPath(this.workdir, path);
    await this.track(options, (signal) =>
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
    return this.track(options, async (signal) => {
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
    await this.track(options, async (signal) => {
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
    if (this.terminating) return false;
    try {
      const info = await this.engine.json<{ State?: { Running?: boolean } }>(
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
    this.terminating ??= (async () => {
      const started = performance.now();
      for (const c of this.running)
        c.abort(new SandboxError(`sandbox ${this.id} was terminated (${reason})`));
      try {
        await this.engine.request('DELETE', `/containers/${this.containerId}`, {
          query: { force: true, v: true },
          ok: [404],
          signal: AbortSignal.timeout(60_000),
        });
        this.dropExitHook();
      } catch (error) {
        this.events.emit('warning', {
          message: `removing container of sandbox ${this.id} failed`,
          cause: error,
        });
      }
      this.unregister();
      this.events.emit('terminate', {
        id: this.id,
        provider: 'docker',
        reason,
        durationMs: performance.now() - started,
      });
    })();
    return this.terminating;
  }
}

/** At process exit nothing async runs: remove a container (by id or name) from a short-lived child process. */
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

/**
 * The engine's form of the limits: memory (swap included), pids, CPU share, ulimits for the per-process
 * ones (a limit overrides the provider's ulimit of the same name), and a size-bounded /tmp and /dev/shm.
 */
export function dockerLimits(
  limits: EffectiveLimits,
  base: DockerUlimit[] | undefined,
): Record<string, unknown> {
  const ulimits = new Map<string, DockerUlimit>();
  for (const u of base ?? [{ Name: 'nofile', Soft: 4096, Hard: 4096 }]) ulimits.set(u.Name, u);
  const set = (Name: string, value: number | undefined) => {
    if (value !== undefined) ulimits.set(Name, { Name, Soft: value, Hard: value });
  };
  set('cpu', limits.cpuSeconds);
  set('fsize', limits.fileSizeBytes);
  set('nofile', limits.openFiles);
  // The Engine has no `as` ulimit; RLIMIT_DATA also bounds anonymous mappings (Linux >= 4.7).
  set('data', limits.addressSpaceBytes);
  const tmp = limits.tmpBytes === undefined ? '' : `,size=${limits.tmpBytes}`;
  return {
    Ulimits: [...ulimits.values()],
    ...(limits.memoryBytes === undefined
      ? {}
      : { Memory: limits.memoryBytes, MemorySwap: limits.memoryBytes }),
    ...(limits.pids === undefined ? {} : { PidsLimit: limits.pids }),
    ...(limits.cpus === undefined ? {} : { NanoCpus: Math.round(limits.cpus * 1e9) }),
    Tmpfs: { '/tmp': `rw,exec,nosuid,nodev,mode=1777${tmp}` },
    ...(limits.tmpBytes === undefined ? {} : { ShmSize: limits.tmpBytes }),
  };
}
