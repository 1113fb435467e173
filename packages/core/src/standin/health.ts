/**
 * A stand-in for an SGLang or vLLM server's health surface, on loopback, for tests of the health gate.
 * Status codes follow the real servers: SGLang answers `/health` and `/health_generate` with 503 while
 * starting (before warm-up) and 200 once ready; vLLM answers `/health` 200 when the engine is alive and
 * 503/500 when it is not. `/model_info` (SGLang) and `/v1/models` (both) answer once the server is up.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EngineKind } from '../engine/types.js';

/** How a health stand-in answers over time. */
export type HealthScript =
  /** 503 until `readyAfterMs` after start and the first `readyAfterRequests` health requests, then 200. */
  | { type: 'slow-start'; readyAfterMs: number; readyAfterRequests?: number | undefined }
  /** Alternates healthy/unhealthy on every health request. */
  | { type: 'flapping' }
  /** 503 forever. */
  | { type: 'never-healthy' }
  /** 200 from the start. */
  | { type: 'healthy' };

/** A running health stand-in. */
export interface HealthStandIn {
  url: string;
  kind: EngineKind;
  /** Health requests received, by path. */
  hits: Map<string, number>;
  /** Stop the server. */
  close(): Promise<void>;
}

/** Start a stand-in of an engine's health surface that answers as `script` says. */
export async function startHealthStandIn(options: {
  kind?: EngineKind | undefined;
  script: HealthScript;
}): Promise<HealthStandIn> {
  const kind = options.kind ?? 'sglang';
  const healthPaths = kind === 'sglang' ? ['/health', '/health_generate'] : ['/health'];
  const started = Date.now();
  const hits = new Map<string, number>();
  let flip = false;

  const healthy = (): boolean => {
    const s = options.script;
    switch (s.type) {
      case 'healthy':
        return true;
      case 'never-healthy':
        return false;
      case 'slow-start':
        return (
          Date.now() - started >= s.readyAfterMs &&
          [...hits.values()].reduce((a, b) => a + b, 0) > (s.readyAfterRequests ?? 0)
        );
      case 'flapping':
        flip = !flip;
        return flip;
    }
  };

  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (healthPaths.includes(path)) {
      hits.set(path, (hits.get(path) ?? 0) + 1);
      if (healthy()) {
        res.writeHead(200).end();
      } else {
        res.writeHead(503).end();
      }
      return;
    }
    if (path === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ object: 'list', data: [{ id: 'Qwen3-14B', object: 'model', owned_by: kind }] }),
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ detail: 'Not Found' }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    kind,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A loopback port with nothing listening on it (connections are refused). */
export async function closedPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}
