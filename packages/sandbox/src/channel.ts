/**
 * The proxy channel of a bubblewrap sandbox: the sandbox keeps its own empty network namespace (only
 * loopback), the host's proxy socket is bound into it, and a small forwarder inside listens on
 * `127.0.0.1:<port>` and relays each connection to that socket. A harness sees an ordinary HTTP base URL;
 * the host's loopback and the outside stay unreachable. Read-only binds make host files (a harness binary)
 * visible without copying them.
 */
import { lstatSync, statSync } from 'node:fs';
import { dirname, isAbsolute, posix } from 'node:path';
import { ConfigError } from '@vime/core';
import { pythonAsset } from './python-assets.js';
import type { ProxyChannel, ReadOnlyBind, SandboxSpec } from './types.js';

/** Default loopback port of the proxy channel inside a sandbox. */
export const PROXY_CHANNEL_PORT = 8765;
/** Where the host's proxy socket appears inside the sandbox (in its private `/tmp`). */
export const PROXY_SOCKET_IN_SANDBOX = '/tmp/.vime-proxy.sock';

/**
 * The forwarder (`python/vime_proxy_forwarder.py`): the session's entry point when a channel is set. It
 * binds the port, forks the relay, then execs the supervisor (argv after the first three), so the port
 * accepts before the session reports ready. With no argv to exec (docker) it exits 0 once the relay is
 * listening.
 */
export function forwarderSource(): string {
  return pythonAsset('vime_proxy_forwarder.py');
}

/** A checked copy of the spec's channel (port defaulted), or undefined. */
export function resolveChannel(
  spec: SandboxSpec,
  user: { uid: number; gid: number } | undefined,
): Required<ProxyChannel> | undefined {
  const channel = spec.proxy;
  if (channel === undefined) return undefined;
  if (typeof channel?.socketPath !== 'string' || !isAbsolute(channel.socketPath)) {
    throw new ConfigError(
      `spec.proxy.socketPath: expected an absolute path of a unix socket, found ${JSON.stringify(channel?.socketPath)}; start the capture proxy with { socketPath } and pass proxy.socketPath`,
    );
  }
  let socket = false;
  try {
    socket = lstatSync(channel.socketPath).isSocket();
  } catch {
    // reported below
  }
  if (!socket) {
    throw new ConfigError(
      `spec.proxy.socketPath ${JSON.stringify(channel.socketPath)} is not a listening unix socket; start the capture proxy with { socketPath } first`,
    );
  }
  assertReachable(channel.socketPath, 'spec.proxy.socketPath', user);
  const port = channel.port ?? PROXY_CHANNEL_PORT;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new ConfigError(`spec.proxy.port: expected a TCP port 1-65535, found ${JSON.stringify(port)}`);
  }
  return { socketPath: channel.socketPath, port };
}

const RESERVED = ['/proc', '/dev', '/tmp'];

/** The spec's read-only binds, checked (absolute paths, existing sources, targets off reserved mounts). */
export function resolveBinds(
  spec: SandboxSpec,
  workdir: string,
  user: { uid: number; gid: number } | undefined,
): ReadOnlyBind[] {
  const binds = spec.readOnlyBinds ?? [];
  if (!Array.isArray(binds)) {
    throw new ConfigError(
      `spec.readOnlyBinds: expected an array of { source, target }, found ${typeof binds}`,
    );
  }
  return binds.map((b, i) => {
    const where = `spec.readOnlyBinds[${i}]`;
    if (typeof b?.source !== 'string' || !isAbsolute(b.source)) {
      throw new ConfigError(
        `${where}.source: expected an absolute host path, found ${JSON.stringify(b?.source)}`,
      );
    }
    try {
      lstatSync(b.source);
    } catch {
      throw new ConfigError(`${where}.source ${JSON.stringify(b.source)} does not exist on the host`);
    }
    assertReachable(b.source, `${where}.source`, user);
    const target = typeof b.target === 'string' && b.target.startsWith('/') ? posix.normalize(b.target) : '';
    const under = (dir: string) => target === dir || target.startsWith(`${dir}/`);
    if (!target || target === '/' || [...RESERVED, workdir].some(under)) {
      throw new ConfigError(
        `${where}.target: expected an absolute sandbox path outside ${[...RESERVED, workdir].join(', ')}, found ${JSON.stringify(b.target)}`,
      );
    }
    // A read-only mount above the work dir would hide it (and its mount point could not be made there).
    if (workdir.startsWith(`${target}/`)) {
      throw new ConfigError(
        `${where}.target ${JSON.stringify(target)} contains the work dir ${workdir}; bind it elsewhere (e.g. /opt/...)`,
      );
    }
    return { source: b.source, target };
  });
}

/**
 * bwrap mounts as the sandbox user, so it must be able to walk to a source: every folder above it needs
 * search permission for that uid (a private home such as /root does not give it).
 */
function assertReachable(path: string, what: string, user: { uid: number; gid: number } | undefined): void {
  if (!user) return;
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    const st = statSync(dir);
    const bit = st.uid === user.uid ? 0o100 : st.gid === user.gid ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) {
      throw new ConfigError(
        `${what} ${JSON.stringify(path)} is not reachable by the sandbox user (uid ${user.uid}): ${dir} has mode ${(st.mode & 0o777).toString(8)}; put it below a folder every user can search (e.g. chmod o+x ${dir}, or a folder under the system temp dir)`,
      );
    }
    if (dir === '/') return;
  }
}

/** Refuse a channel or binds on a provider that cannot set them up (local). */
export function refuseChannel(spec: SandboxSpec, provider: string): void {
  for (const field of ['proxy', 'readOnlyBinds'] as const) {
    if (spec?.[field] !== undefined) {
      throw new ConfigError(
        `spec.${field} is not supported by the ${provider} provider yet; use bubblewrapProvider() for a sandbox that reaches only the capture proxy`,
      );
    }
  }
}
