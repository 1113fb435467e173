// Run by plain node (no tsx, no source condition), so `@vime/sandbox` is the built dist/: a bubblewrap
// session with a proxy channel starts only if the bundle finds its Python files (the session supervisor
// and the forwarder). Prints one JSON line: what a command inside got from the host's socket.
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bubblewrapProvider, PROXY_CHANNEL_PORT } from '@vime/sandbox';

const dir = mkdtempSync(join(tmpdir(), 'vime-dist-python-'));
// The sandbox user walks to the socket.
chmodSync(dir, 0o755);
const socketPath = join(dir, 'proxy.sock');
const server = createServer((socket) => socket.end('hello from the host'));
await new Promise((resolve) => server.listen(socketPath, resolve));
chmodSync(socketPath, 0o666);
const provider = bubblewrapProvider({ rootDir: join(dir, 'sandboxes') });
try {
  const sandbox = await provider.create({ workdir: '/work', proxy: { socketPath } });
  try {
    const connect = `import socket; print(socket.create_connection(('127.0.0.1', ${PROXY_CHANNEL_PORT})).recv(64).decode())`;
    const r = await sandbox.exec(['python3', '-c', connect], { timeoutMs: 30_000 });
    const module = import.meta.resolve('@vime/sandbox');
    console.log(JSON.stringify({ module, exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }));
  } finally {
    await sandbox.terminate();
  }
} finally {
  server.close();
  rmSync(dir, { recursive: true, force: true });
}
