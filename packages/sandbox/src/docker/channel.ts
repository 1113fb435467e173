/**
 * The proxy channel and read-only binds of a docker sandbox: the same boundary as bubblewrap's
 * (`../channel.ts`, which checks the spec and loads the forwarder). The container keeps `NetworkMode:
 * none`; the proxy's socket is bind-mounted read-only and the forwarder, started by an exec before the
 * sandbox is handed out, relays `127.0.0.1:<port>` inside the container's own network namespace to it.
 */
import { ConfigError, SandboxError } from '@vime/core';
import { forwarderSource, PROXY_SOCKET_IN_SANDBOX } from '../channel.js';
import { tailOf } from '../output.js';
import type { ProxyChannel, ReadOnlyBind } from '../types.js';
import type { DockerEngine } from './engine-api.js';

/** A bind mount in the Engine's `HostConfig.Mounts` form (JSON: no `:` or `,` parsing of paths). */
export interface DockerBindMount {
  Type: 'bind';
  Source: string;
  Target: string;
  ReadOnly: true;
}

/**
 * The channel's socket and the spec's binds as read-only bind mounts. With an image that binds the host's
 * `/usr`, a target at or below `/usr` is refused: its mount point would have to be made in the host's `/usr`.
 */
export function channelMounts(
  channel: Required<ProxyChannel> | undefined,
  binds: readonly ReadOnlyBind[],
  hostUsr: boolean,
): DockerBindMount[] {
  binds.forEach((b, i) => {
    if (hostUsr && (b.target === '/usr' || b.target.startsWith('/usr/'))) {
      throw new ConfigError(
        `spec.readOnlyBinds[${i}].target ${JSON.stringify(b.target)}: the image binds the host's /usr read-only, so nothing can be mounted below it; choose a target outside /usr (e.g. /opt/...)`,
      );
    }
  });
  return [
    ...(channel ? [{ source: channel.socketPath, target: PROXY_SOCKET_IN_SANDBOX }] : []),
    ...binds,
  ].map((b) => ({ Type: 'bind', Source: b.source, Target: b.target, ReadOnly: true }));
}

/**
 * Start the forwarder in a started container and wait until its port listens: the exec binds the port,
 * forks the relay and exits 0, so a zero exit means connections are accepted. A missing python3 is a
 * `ConfigError` naming the image.
 */
export async function startForwarder(
  engine: DockerEngine,
  containerId: string,
  channel: Required<ProxyChannel>,
  image: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  const deadline = AbortSignal.timeout(30_000);
  const wait = signal ? AbortSignal.any([signal, deadline]) : deadline;
  const { Id } = await engine.json<{ Id: string }>('POST', `/containers/${containerId}/exec`, {
    json: {
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      Cmd: ['python3', '-c', forwarderSource(), PROXY_SOCKET_IN_SANDBOX, String(channel.port)],
    },
    signal: wait,
  });
  const output: Buffer[] = [];
  await engine.attachExec(Id, (_stream, payload) => output.push(Buffer.from(payload)), wait);
  const { ExitCode } = await engine.json<{ ExitCode: number | null }>('GET', `/exec/${Id}/json`, {
    signal: wait,
  });
  if (ExitCode === 0) return;
  const said = tailOf(Buffer.concat(output).toString('utf8').trim(), 500);
  // 126/127: the runtime could not run python3 at all (not found on PATH, or not executable).
  if (ExitCode === 126 || ExitCode === 127) {
    throw new ConfigError(
      `spec.proxy: image ${JSON.stringify(image)} has no python3 the sandbox user can run (exit ${ExitCode}: ${said}); the proxy channel's forwarder needs python3 on PATH: use an image that has it (or one labelled dev.vime.host-usr=true, which binds the host's /usr)`,
    );
  }
  throw new SandboxError(
    `spec.proxy: the forwarder did not listen on 127.0.0.1:${channel.port} in container ${containerId.slice(0, 12)} (exit ${ExitCode}): ${said}`,
    { code: 'sandbox_error', data: { image, port: channel.port } },
  );
}
