/**
 * The proxy's admin routes: `/admin/engines` lists (GET), adds (POST `{url, kind}`) and removes (DELETE
 * `{url}`) routed engines at run time, for an autoscaler; `/admin/weight-version` reads the router's
 * weight-update log (GET) and notes weights a trainer in another process loaded (POST `{version, urls?}`,
 * `router.noteWeightUpdate`). They exist only with an admin token, and every call must carry it as
 * `Authorization: Bearer <token>`: agents reach the same server.
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

const WeightVersionSchema = z.object({
  version: z.string().min(1),
  urls: z.array(z.string()).optional(),
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
  const known = path === '/admin/engines' || path === '/admin/weight-version';
  if (token === undefined || !known) return fail(404, `no route ${method} ${path}`);
  if (credential !== token) return fail(401, 'admin routes need Authorization: Bearer <adminToken>');
  if (path === '/admin/weight-version') return weightVersionRoute(router, method, readBody, fail);
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

/** `/admin/weight-version`: the weight-update log (GET), or a version the engines serve from now on (POST). */
async function weightVersionRoute(
  router: EngineRouter,
  method: string,
  readBody: () => Promise<string>,
  fail: (status: number, message: string) => { status: number; body: unknown },
): Promise<{ status: number; body: unknown }> {
  const log = () => ({ status: 200, body: { log: router.weightLog.entries() } });
  if (method === 'GET') return log();
  if (method !== 'POST') return fail(405, `admin: ${method} not allowed on /admin/weight-version`);
  let body: z.infer<typeof WeightVersionSchema>;
  try {
    body = WeightVersionSchema.parse(JSON.parse(await readBody()));
  } catch (error) {
    const why = error instanceof z.ZodError ? z.prettifyError(error) : 'request body is not valid JSON';
    return fail(400, `admin: ${why}; send {"version": "7"} (and "urls": [...] for some engines only)`);
  }
  try {
    router.noteWeightUpdate(body.version, { urls: body.urls });
  } catch (error) {
    return fail(400, (error as Error).message);
  }
  return log();
}
