/**
 * The capture proxy on a unix socket as well as TCP: a sandbox without a network reaches the proxy
 * through this socket bound into it (see `@vime/sandbox`'s proxy channel). Connections are handed to
 * the same HTTP server, so the socket gets every limit and route the TCP listener has.
 */
import { chmod, lstat, unlink } from 'node:fs/promises';
import type { Server } from 'node:http';
import { createServer, type Server as NetServer } from 'node:net';
import { ConfigError } from '../errors.js';

export interface UnixListener {
  path: string;
  close(): Promise<void>;
}

/**
 * Listen on `path` and pass each connection to `server`. The socket is made connectable by any user
 * (the sandbox runs as an unprivileged uid): the session id in each request is the credential, as on
 * the loopback port. A stale socket left by a killed process is replaced; any other file is refused.
 */
export async function listenUnixSocket(server: Server, path: string): Promise<UnixListener> {
  if (typeof path !== 'string' || !path.startsWith('/')) {
    throw new ConfigError(`socketPath: expected an absolute path, found ${JSON.stringify(path)}`);
  }
  const existing = await lstat(path).catch(() => undefined);
  if (existing && !existing.isSocket()) {
    throw new ConfigError(
      `socketPath ${JSON.stringify(path)} exists and is not a socket; pick a path of its own for the proxy`,
    );
  }
  if (existing) await unlink(path);
  const net: NetServer = createServer((socket) => server.emit('connection', socket));
  await new Promise<void>((resolve, reject) => {
    net.once('error', reject);
    net.listen(path, () => {
      net.off('error', reject);
      resolve();
    });
  });
  await chmod(path, 0o666);
  return {
    path,
    close: () =>
      new Promise<void>((resolve) => {
        net.close(() => resolve());
      }),
  };
}
