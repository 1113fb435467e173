/**
 * `docker`: one container per sandbox through the Docker Engine REST API (or Podman's compatible
 * service): no network, all capabilities dropped, no-new-privileges, a non-root user, memory/pids/CPU
 * limits, files moved with the archive endpoints. Timeouts are enforced inside the container, because
 * dropping an attached exec's HTTP connection does not stop the process there.
 */
import { ConfigError, SandboxError } from '@vime/core';
import type { Logger } from '@vime/core/utils';
import { EventEmitter } from 'eventemitter3';
import { resolveBinds, resolveChannel } from '../channel.js';
import {
  forwardWarnings,
  newSandboxId,
  onProcessExit,
  runOf,
  sandboxLabels,
  withTrackedCreate,
} from '../lifecycle.js';
import { checkLifetime, type EffectiveLimits, resolveLimits, resolveWorkdir } from '../limits.js';
import { packTar } from '../tar.js';
import type { OpOptions, Sandbox, SandboxEmitter, SandboxProvider, SandboxSpec } from '../types.js';
import { channelMounts, startForwarder } from './channel.js';
import { DockerEngine, type DockerTls } from './engine-api.js';
import { DockerSandbox, removeContainerSync } from './sandbox.js';

/** Image label saying "bind the host's /usr read-only" (a registry-free image holding only folder stubs). */
export const HOST_USR_LABEL = 'dev.vime.host-usr';
/** The image a Docker sandbox runs when its spec names none. */
export const DEFAULT_DOCKER_IMAGE = 'vime/sandbox-base:latest';

/** One ulimit of a Docker container, as the Engine API takes it. */
export interface DockerUlimit {
  Name: string;
  Soft: number;
  Hard: number;
}

/** Options of `dockerProvider`. */
export interface DockerProviderOptions {
  /** Engine socket (default: `DOCKER_HOST`'s unix socket, else /var/run/docker.sock). */
  socketPath?: string | undefined;
  /**
   * A remote engine instead of a socket: `tcp://host:port`, reached over TLS with `tls` (PEM contents of the
   * CA that signed the engine's certificate, and this client's certificate and key).
   */
  host?: string | undefined;
  tls?: DockerTls | undefined;
  /** Share one engine client between providers. */
  engine?: DockerEngine | undefined;
  /**
   * Image when the spec names none (default `vime/sandbox-base:latest`). A create never pulls (`pullImage`
   * does, before a run).
   */
  defaultImage?: string | undefined;
  /** Container user (default `1000:1000`). */
  user?: string | undefined;
  /** PATH inside the container where the image sets none (default `/usr/local/bin:/usr/bin:/bin`). */
  path?: string | undefined;
  /**
   * Ulimits for every container (default nofile 4096); a spec's limits of the same name (`openFiles`,
   * 1024 by default, `cpuSeconds`, `fileSizeBytes`) take precedence. Rootful Podman on hosts whose root
   * lacks CAP_SYS_RESOURCE also needs `{ Name: 'nproc', Soft: 4096, Hard: 4096 }`.
   */
  ulimits?: DockerUlimit[] | undefined;
  /** Extra `HostConfig` fields merged over the defaults (e.g. `Runtime: 'runsc'`). */
  hostConfig?: Record<string, unknown> | undefined;
  events?: SandboxEmitter | undefined;
  logger?: Logger | undefined;
  /** Terminate live sandboxes on SIGINT/SIGTERM/SIGHUP and exit (default true). */
  handleSignals?: boolean | undefined;
}

interface ImageInfo {
  hostUsr: boolean;
  /** The image sets its own PATH (a SWE-smith image's conda), kept unless the spec sets one. */
  hasPath: boolean;
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

/** The image facts a create needs, looked up once per image (a failed lookup is tried again next time). */
function imageInfoCache(engine: DockerEngine): (image: string, signal?: AbortSignal) => Promise<ImageInfo> {
  const images = new Map<string, Promise<ImageInfo>>();
  return (image, signal) => {
    let info = images.get(image);
    if (!info) {
      info = engine
        .json<{
          Config?:
            | { Labels?: Record<string, string> | null | undefined; Env?: string[] | null | undefined }
            | undefined;
        }>('GET', `/images/${encodeURIComponent(image)}/json`, { signal })
        .then((res) => ({
          hostUsr: res.Config?.Labels?.[HOST_USR_LABEL] === 'true',
          hasPath: (res.Config?.Env ?? []).some((e) => e.startsWith('PATH=')),
        }))
        .catch((error) => {
          images.delete(image);
          if (SandboxError.isInstance(error) && error.code === 'not_found') {
            throw new SandboxError(
              `image ${JSON.stringify(image)} is not present in the engine at ${engine.address}; ` +
                'dockerProvider never pulls: pull it first (pullImage; the loop pulls missing images before its first step), or build or import it (scripts/docker-up.sh imports vime/sandbox-base:latest)',
              { cause: error, code: 'image_not_found' },
            );
          }
          throw error;
        });
      images.set(image, info);
    }
    return info;
  };
}

/** Sandboxes as Docker (or Podman) containers, created through the Engine API. */
export function dockerProvider(options: DockerProviderOptions = {}): SandboxProvider {
  const events = options.events ?? (new EventEmitter() as SandboxEmitter);
  forwardWarnings(events, options.logger);
  const engine =
    options.engine ??
    new DockerEngine(
      options.host === undefined ? options.socketPath : { host: options.host, tls: options.tls },
    );
  const user = options.user ?? '1000:1000';
  const owner = parseUser(user);
  const path = options.path ?? '/usr/local/bin:/usr/bin:/bin';
  const imageInfo = imageInfoCache(engine);

  return withTrackedCreate(
    {
      name: 'docker',
      events,
      async create(spec: SandboxSpec, op: OpOptions = {}): Promise<Sandbox> {
        const { signal } = op;
        signal?.throwIfAborted();
        const started = performance.now();
        const workdir = resolveWorkdir(spec?.workdir);
        checkLifetime(spec.lifetimeMs);
        const limits = resolveLimits(spec.limits);
        // The engine mounts as its own user: only the sandbox user's access to the files themselves matters.
        if (engine.socketPath === undefined) refuseHostPaths(spec, engine.address);
        const channel = resolveChannel(spec, undefined);
        const binds = resolveBinds(spec, workdir, undefined);
        const image = spec.image ?? options.defaultImage ?? DEFAULT_DOCKER_IMAGE;
        const info = await imageInfo(image, signal);
        const mounts = channelMounts(channel, binds, info.hostUsr);
        const hostLimits = dockerLimits(limits, options.ulimits);
        const id = newSandboxId(runOf(spec.labels));
        const labels = sandboxLabels(id, spec.labels);
        if (spec.lifetimeMs !== undefined) labels['vime.lifetime-ms'] = String(spec.lifetimeMs);
        const name = `vime-${id}`;
        // From here an exit at any step removes the container (by name: it may not be created yet).
        const dropExitHook = onProcessExit(() => removeContainerSync(engine, name));
        const body = {
          Image: image,
          // A lifetime is also kept by the engine: the container's only process ends then, and the engine
          // removes the stopped container (AutoRemove), even when this process or its host is gone.
          Cmd: [
            'sleep',
            spec.lifetimeMs === undefined ? 'infinity' : String(Math.ceil(spec.lifetimeMs / 1000)),
          ],
          Entrypoint: [],
          User: user,
          WorkingDir: workdir,
          Env: Object.entries({
            ...(info.hasPath ? {} : { PATH: path }),
            HOME: workdir,
            LANG: 'C.UTF-8',
            ...spec.env,
          }).map(([k, v]) => `${k}=${v}`),
          Labels: labels,
          Hostname: 'sandbox',
          NetworkDisabled: true,
          HostConfig: {
            NetworkMode: 'none',
            Init: true,
            CapDrop: ['ALL'],
            SecurityOpt: ['no-new-privileges'],
            Binds: info.hostUsr ? ['/usr:/usr:ro'] : [],
            AutoRemove: spec.lifetimeMs !== undefined,
            ...hostLimits,
            Mounts: [...(hostLimits.Mounts as unknown[]), ...mounts],
            ...options.hostConfig,
          },
        };
        const remove = () =>
          engine
            .request('DELETE', `/containers/${name}`, {
              query: { force: true, v: true },
              ok: [404, 409], // 409: the engine is removing it already (AutoRemove)
              signal: AbortSignal.timeout(60_000),
            })
            .then(dropExitHook, () => {});
        let containerId: string;
        try {
          // Not aborted midway: an engine finishes a create whose client went away, and the container must
          // then be known to be removed. The abort is honoured right after.
          const created = await engine.json<{ Id: string; Warnings?: string[] | null | undefined }>(
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
          if (channel) await startForwarder(engine, containerId, channel, image, signal);
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
          lifetimeMs: spec.lifetimeMs,
        });
        events.emit('create', { id, provider: 'docker', labels, durationMs: performance.now() - started });
        return sandbox;
      },
    },
    options.handleSignals ?? true,
  );
}

/**
 * A remote engine mounts paths of its own host: this host's proxy socket and files are not there. Refused
 * rather than bound to whatever the remote host has at those paths.
 */
function refuseHostPaths(spec: SandboxSpec, address: string): void {
  const field = spec.proxy ? 'proxy' : spec.readOnlyBinds?.length ? 'readOnlyBinds' : undefined;
  if (field === undefined) return;
  throw new ConfigError(
    `spec.${field} names paths of this host, but the engine at ${address} is remote and would mount its own host's paths; ` +
      `drop ${field} for remote engines (a proxy channel to a remote engine is not built yet), or use a local engine's socket`,
  );
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
    // A tmpfs volume rather than `Tmpfs`: the archive endpoints (writeFile, readFile) do not see into a
    // `Tmpfs` mount, but do into volumes; the container's removal (`v: true`) removes it.
    Mounts: [
      {
        Type: 'volume',
        Target: '/tmp',
        VolumeOptions: {
          DriverConfig: {
            Name: 'local',
            Options: { type: 'tmpfs', device: 'tmpfs', o: `mode=1777,nosuid,nodev${tmp}` },
          },
        },
      },
    ],
    ...(limits.tmpBytes === undefined ? {} : { ShmSize: limits.tmpBytes }),
  };
}
