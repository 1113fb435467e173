/**
 * An engine's 429 through the real Docker client: a real HTTP server on a unix socket answers as a gateway
 * in front of an engine would, and the client's error carries the `Retry-After` the fleet honours.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { retryAfterMs as parseRetryAfter } from '@vime/core/utils';
import { describe, expect, it } from 'vitest';
import { DockerEngine } from '../docker/engine-api.js';
import { SandboxRateLimited } from '../errors.js';

describe('429 from an engine', () => {
  it('the Docker client turns a 429 into SandboxRateLimited carrying its Retry-After', async () => {
    // A real HTTP server on a unix socket, answering as a gateway in front of an engine would.
    const dir = mkdtempSync(join(tmpdir(), 'vime-429-'));
    const server = createServer((req, res) => {
      if (req.url === '/version') {
        res.end(JSON.stringify({ ApiVersion: '1.41', MinAPIVersion: '1.12' }));
        return;
      }
      res.writeHead(429, { 'retry-after': '7', 'content-type': 'application/json' });
      res.end(JSON.stringify({ message: 'too many container creates' }));
    });
    const socket = join(dir, 'engine.sock');
    await new Promise<void>((r) => server.listen(socket, r));
    const engine = new DockerEngine(socket);
    try {
      const error = await engine.request('POST', '/containers/create', { json: {} }).catch((e: unknown) => e);
      expect(SandboxRateLimited.isInstance(error)).toBe(true);
      expect(SandboxError.isInstance(error) && error.code).toBe('rate_limited');
      expect((error as SandboxRateLimited).retryAfterMs).toBe(7000);
      expect((error as Error).message).toMatch(/too many container creates/);
    } finally {
      await engine.close();
      await new Promise((r) => server.close(r));
      rmSync(dir, { recursive: true, force: true });
    }
    expect(
      parseRetryAfter('Wed, 21 Oct 2015 07:28:10 GMT', Date.parse('Wed, 21 Oct 2015 07:28:00 GMT')),
    ).toBe(10_000);
    expect(parseRetryAfter(undefined)).toBeUndefined();
    expect(parseRetryAfter('soon')).toBeUndefined();
  });
});
