/**
 * The proxy on a unix socket beside TCP: the same routes and sessions answer there; a stale socket left by
 * a killed proxy is replaced, any other file at the path is refused, and closing the proxy removes it.
 */
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { closeAll, closers, setup } from '../__fixtures__/proxy-harness.js';
import { ConfigError } from '../errors.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-proxy-socket-'));
afterEach(closeAll);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function post(
  socketPath: string,
  path: string,
  key: string,
  body: unknown,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath, path, method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key } },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => {
          text += d.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('capture proxy on a unix socket', () => {
  it('serves turns of a session over the socket, connectable by any user', async () => {
    const socketPath = join(dir, 'a.sock');
    const { proxy } = await setup(() => 'hello over the socket', { proxy: { socketPath } });
    expect(proxy.socketPath).toBe(socketPath);
    expect(statSync(socketPath).mode & 0o777).toBe(0o666);
    const session = proxy.openSession('s1');
    const r = await post(socketPath, '/v1/messages', session.apiKey, {
      max_tokens: 32,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body).content[0].text).toBe('hello over the socket');
    expect(proxy.trajectories.trajectory('s1').turns).toHaveLength(1);
    const unknown = await post(socketPath, '/v1/messages', 'nope', { max_tokens: 1, messages: [] });
    expect(unknown.status).toBe(401);
    await proxy.close();
    closers.pop();
    expect(existsSync(socketPath)).toBe(false);
    await expect(post(socketPath, '/v1/messages', session.apiKey, {})).rejects.toThrow(/ENOENT/);
  });

  it('replaces a stale socket and refuses any other file or a relative path', async () => {
    const stale = join(dir, 'stale.sock');
    const dead = createServer();
    await new Promise<void>((resolve) => dead.listen(stale, resolve));
    // A killed proxy leaves its socket file behind: simulate by closing without unlinking.
    (dead as unknown as { _handle: { close(): void } | null })._handle?.close();
    const { proxy } = await setup(() => 'ok', { proxy: { socketPath: stale } });
    expect(proxy.socketPath).toBe(stale);
    const file = join(dir, 'regular');
    writeFileSync(file, 'keep me');
    await expect(setup(() => 'ok', { proxy: { socketPath: file } })).rejects.toThrow(/is not a socket/);
    await expect(setup(() => 'ok', { proxy: { socketPath: 'rel.sock' } })).rejects.toSatisfy((e: unknown) =>
      ConfigError.isInstance(e),
    );
    expect(statSync(file).isFile()).toBe(true);
  });
});
