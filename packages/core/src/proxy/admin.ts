/**
 * The proxy's admin route, `/admin/engines`: list (GET), add (POST `{url, kind}`) and remove (DELETE
 * `{url}`) routed engines at run time, for an autoscaler. It exists only with an admin token, and every
 * call must carry it as `Authorization: Bearer <token>`: agents reach the same server.
 */
import { z } from 'zod';
import { sglangEngine } from '../engine/sglang.js';
import { vllmEngine } from '../engine/vllm.js';
import { errorBody } from './dialects.js';
import type { EngineRouter } from './router.js';

const AdminEngineSchema = z.object({
  url: z.url(),
  kind: z.enum(['sglang', 'vllm']).default('sglang'),
});

export interface AdminRequest {
  method: string;
  path: string;
  credential: string | undefined;
  readBody: () => Promise<string>;
}

export async function adminRoute(
  router: EngineRouter,
  token: string | undefined,
  { method, path, credential, readBody }: AdminRequest,
): Promise<{ status: number; body: unknown }> {
  const fail = (status: number, message: string) => ({ status, body: errorBody('openai', status, message) });
  if (token === undefined || path !== '/admin/engines') return fail(404, `no route ${method} ${path}`);
  if (credential !== token) return fail(401, 'admin routes need Authorization: Bearer <adminToken>');
  if (method === 'GET')
    return { status: 200, body: { engines: router.status(), breakerOpen: router.breakerOpen } };
  if (method !== 'POST' && method !== 'DELETE') return fail(405, `admin: ${method} not allowed on ${path}`);
  let body: z.infer<typeof AdminEngineSchema>;
  try {
    body = AdminEngineSchema.parse(JSON.parse(await readBody()));
  } catch (error) {
    const why = error instanceof z.ZodError ? z.prettifyError(error) : 'request body is not valid JSON';
    return fail(400, `admin: ${why}; send {"url": "http://host:port", "kind": "sglang"}`);
  }
  try {
    if (method === 'POST') {
      router.add(body.kind === 'vllm' ? vllmEngine(body.url) : sglangEngine(body.url), { owned: true });
    } else await router.remove(body.url);
  } catch (error) {
    return fail(400, (error as Error).message);
  }
  return { status: 200, body: { engines: router.status() } };
}
