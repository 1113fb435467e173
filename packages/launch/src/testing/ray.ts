/**
 * A Ray dashboard stand-in on loopback that answers the Jobs REST API with Ray's recorded shapes and
 * texts (`ray/dashboard/modules/job/job_head.py`, `common.py`, token auth, the browser-traffic guard).
 * Jobs follow a script: PENDING, then RUNNING while log lines appear, then SUCCEEDED or FAILED.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { JobDetails, JobStatus } from '../ray/types.js';

/** How a job of the fake Ray dashboard behaves: time pending, time running, its log and its outcome. */
export interface FakeJobScript {
  /** Milliseconds in PENDING before the driver starts. */
  pendingMs?: number | undefined;
  /** Log lines, one emitted every `lineIntervalMs` while RUNNING. */
  lines?: string[] | undefined;
  lineIntervalMs?: number | undefined;
  /** Outcome once every line is out; FAILED carries `exitCode`. */
  outcome?: 'SUCCEEDED' | 'FAILED' | undefined;
  exitCode?: number | undefined;
}

/** Options of `startFakeRay`. */
export interface FakeRayOptions {
  /** Require `Authorization: Bearer <token>` (RAY_AUTH_MODE=token). */
  token?: string | undefined;
  /** Answer this many submissions with 500 "No available agent..." first (agent still registering). */
  agentMissingFor?: number | undefined;
  /** How a duplicate submission_id is answered: 400 from the agent, or 500 wrapped by the head. */
  duplicateStatus?: 400 | 500 | undefined;
  /** Script for every job, or per entrypoint. */
  script?: FakeJobScript | ((entrypoint: string) => FakeJobScript) | undefined;
  /** Listen on this port (default: any free one). */
  port?: number | undefined;
}

/** A running fake Ray dashboard: its URL, the requests it received and its jobs. */
export interface FakeRay {
  url: string;
  /** Every request received: method, path and headers. */
  requests: Array<{ method: string; path: string; headers: IncomingMessage['headers'] }>;
  /** Submission ids in the order jobs were created (i.e. actually started). */
  created: string[];
  /** Client connections open right now (a client that closes its pool leaves none). */
  openConnections(): Promise<number>;
  /** Stop the server. */
  close(): Promise<void>;
}

const SUBMIT_KEYS = new Set([
  'entrypoint',
  'submission_id',
  'job_id',
  'runtime_env',
  'metadata',
  'entrypoint_num_cpus',
  'entrypoint_num_gpus',
  'entrypoint_memory',
  'entrypoint_resources',
  'entrypoint_label_selector',
]);
const BROWSER_HEADERS = [
  'sec-fetch-mode',
  'sec-fetch-dest',
  'sec-fetch-site',
  'sec-fetch-user',
  'origin',
  'referer',
];
const PENDING_MESSAGE =
  'Job has not started yet. It may be waiting for resources (CPUs, GPUs, memory, custom resources) to become available. It may be waiting for the runtime environment to be set up.';

interface FakeJob {
  details: JobDetails;
  script: ResolvedScript;
  created: number;
  stoppedAt?: number | undefined;
}

function traceback(error: string): string {
  return `Traceback (most recent call last):\n  File "/ray/dashboard/modules/job/job_head.py", line 412, in submit_job\n    resp = await job_agent_client.submit_job_internal(submit_request)\n${error}\n`;
}

/** A Ray dashboard on loopback answering the Jobs REST API; `close()` ends every connection. */
export async function startFakeRay(options: FakeRayOptions = {}): Promise<FakeRay> {
  const dashboard = new FakeDashboard(options);
  const server: Server = createServer((req, res) => void dashboard.handle(req, res));
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests: dashboard.requests,
    created: dashboard.created,
    openConnections: () =>
      new Promise<number>((resolve, reject) =>
        server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
      ),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** An answer: Ray sends errors as plain text (often a Python traceback) and results as JSON. */
interface Reply {
  status: number;
  contentType: string;
  body: string;
}
const text = (status: number, body: string): Reply => ({
  status,
  contentType: 'text/plain; charset=utf-8',
  body,
});
const json = (status: number, body: unknown): Reply => ({
  status,
  contentType: 'application/json; charset=utf-8',
  body: JSON.stringify(body),
});

/** The dashboard's jobs and the answer to each request, route by route. */
class FakeDashboard {
  readonly jobs = new Map<string, FakeJob>();
  readonly requests: FakeRay['requests'] = [];
  readonly created: string[] = [];
  /** Submissions still to be answered "No available agent" (the agent is registering). */
  private agentMissing: number;

  constructor(private readonly options: FakeRayOptions) {
    this.agentMissing = options.agentMissingFor ?? 0;
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const path = (req.url ?? '/').split('?')[0]!;
    this.requests.push({ method, path, headers: req.headers });
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const reply = this.answer(method, path, req.headers, Buffer.concat(chunks));
    res.writeHead(reply.status, { 'content-type': reply.contentType }).end(reply.body);
  }

  private answer(method: string, path: string, headers: IncomingMessage['headers'], body: Buffer): Reply {
    const refused = this.refusal(method, headers);
    if (refused) return refused;
    if (method === 'GET' && path === '/api/version') return json(200, VERSION);
    if (method === 'POST' && path === '/api/jobs/') return this.submit(body);
    if (method === 'GET' && path === '/api/jobs/') {
      return json(200, [...[...this.jobs.values()].map((j) => observe(j).details), DRIVER_JOB]);
    }
    const match = /^\/api\/jobs\/([^/]+)(\/logs|\/stop)?$/.exec(path);
    const reply = match && this.jobRoute(method, decodeURIComponent(match[1]!), match[2]);
    return reply || text(404, '404: Not Found');
  }

  /** Ray's browser-traffic guard (Ray >= 2.52: a POST or PUT that looks like a browser), then token auth. */
  private refusal(method: string, h: IncomingMessage['headers']): Reply | undefined {
    if (method === 'POST' || method === 'PUT') {
      const browser =
        BROWSER_HEADERS.some((name) => h[name] !== undefined) ||
        Object.keys(h).some((k) => k.startsWith('access-control-request-')) ||
        /^Mozilla/.test(h['user-agent'] ?? '');
      if (browser) return text(405, 'Method Not Allowed for browser traffic.');
    }
    if (this.options.token !== undefined) {
      const auth = h.authorization ?? h['x-ray-authorization'];
      const presented = typeof auth === 'string' ? auth.replace(/^Bearer\s+/i, '') : undefined;
      if (!presented) return text(401, 'Unauthorized: Missing authentication token');
      if (presented !== this.options.token) return text(403, 'Forbidden: Invalid authentication token');
    }
    return undefined;
  }

  /** POST /api/jobs/: validated as Ray's `JobSubmitRequest`, then a PENDING job following its script. */
  private submit(raw: Buffer): Reply {
    if (this.agentMissing > 0) {
      this.agentMissing--;
      return text(500, 'No available agent to submit job, please try again later.');
    }
    const parsed = submitRequest(raw);
    if ('refused' in parsed) return parsed.refused;
    const body = parsed.request;
    const id =
      (body.submission_id as string | undefined) ??
      (body.job_id as string | undefined) ??
      `raysubmit_${randomBytes(8).toString('hex').slice(0, 16)}`;
    if (this.jobs.has(id)) {
      const error = `ValueError: Job with submission_id ${id} already exists. Please use a different submission_id.`;
      return this.options.duplicateStatus === 400
        ? text(400, traceback(error))
        : text(500, traceback(`RuntimeError: Request failed with status code 400: ${traceback(error)}.`));
    }
    const now = Date.now();
    this.jobs.set(id, {
      created: now,
      script: scriptFor(this.options, body.entrypoint),
      details: {
        type: 'SUBMISSION',
        job_id: null,
        submission_id: id,
        driver_info: null,
        status: 'PENDING',
        entrypoint: body.entrypoint,
        message: PENDING_MESSAGE,
        error_type: null,
        start_time: now,
        end_time: null,
        metadata: (body.metadata as Record<string, string> | undefined) ?? {},
        runtime_env: (body.runtime_env as Record<string, unknown> | undefined) ?? {},
        driver_agent_http_address: 'http://10.0.0.2:52365',
        driver_node_id: 'b5c4a3f2e1d0',
        driver_exit_code: null,
      },
    });
    this.created.push(id);
    return json(200, { job_id: id, submission_id: id });
  }

  /** GET, DELETE /api/jobs/{id}, GET …/logs and POST …/stop; undefined for a route Ray does not have. */
  private jobRoute(method: string, id: string, action: string | undefined): Reply | undefined {
    if (id === DRIVER_JOB.job_id && action) {
      return text(400, `Can only ${action === '/logs' ? 'get logs of' : 'stop'} submission type jobs`);
    }
    const job = this.jobs.get(id);
    if (!job) return text(404, `Job ${id} does not exist`);
    const { details, logs } = observe(job);
    if (method === 'GET' && !action) return json(200, details);
    if (method === 'GET' && action === '/logs') return json(200, { logs });
    if (method === 'POST' && action === '/stop') {
      if (isDone(details.status)) return json(200, { stopped: false });
      job.stoppedAt = Date.now();
      details.status = 'STOPPED';
      details.message = 'Job was intentionally stopped.';
      details.end_time = job.stoppedAt;
      return json(200, { stopped: true });
    }
    if (method === 'DELETE' && !action) {
      if (!isDone(details.status)) {
        return text(
          500,
          traceback(
            `RuntimeError: Attempted to delete job '${id}', but it is in a non-terminal state ${details.status}.`,
          ),
        );
      }
      this.jobs.delete(id);
      return json(200, { deleted: true });
    }
    return undefined;
  }
}

type SubmitBody = Record<string, unknown> & { entrypoint: string };

/** A submission's JSON body, or the 400 Ray answers for a malformed one. */
function submitRequest(raw: Buffer): { request: SubmitBody } | { refused: Reply } {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
  } catch {
    return {
      refused: text(
        400,
        traceback('json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)'),
      ),
    };
  }
  const unknown = Object.keys(body).find((k) => !SUBMIT_KEYS.has(k));
  if (unknown) {
    return {
      refused: text(
        400,
        traceback(`TypeError: JobSubmitRequest.__init__() got an unexpected keyword argument '${unknown}'`),
      ),
    };
  }
  if (typeof body.entrypoint !== 'string') {
    const missing =
      "TypeError: JobSubmitRequest.__init__() missing 1 required positional argument: 'entrypoint'";
    return { refused: text(400, traceback(missing)) };
  }
  return { request: body as SubmitBody };
}

/** A job's script with every default filled in. */
type ResolvedScript = { [K in keyof FakeJobScript]-?: Exclude<FakeJobScript[K], undefined> };

function scriptFor(options: FakeRayOptions, entrypoint: string): ResolvedScript {
  const s = typeof options.script === 'function' ? options.script(entrypoint) : (options.script ?? {});
  return {
    pendingMs: s.pendingMs ?? 50,
    lines: s.lines ?? ['hello from the job'],
    lineIntervalMs: s.lineIntervalMs ?? 20,
    outcome: s.outcome ?? 'SUCCEEDED',
    exitCode: s.exitCode ?? (s.outcome === 'FAILED' ? 1 : 0),
  };
}

/** Advance a job along its script to "now" (or to when it was stopped); its logs so far. */
function observe(job: FakeJob): { details: JobDetails; logs: string } {
  const d = job.details;
  const { script } = job;
  const now = job.stoppedAt ?? Date.now();
  const runningFor = now - job.created - script.pendingMs;
  const shown =
    runningFor < 0 ? 0 : Math.min(script.lines.length, Math.floor(runningFor / script.lineIntervalMs) + 1);
  const logs = script.lines
    .slice(0, shown)
    .map((l) => `${l}\n`)
    .join('');
  if (job.stoppedAt !== undefined || d.status === 'STOPPED') return { details: d, logs };
  if (runningFor < 0) return { details: d, logs };
  if (d.status === 'PENDING') {
    d.status = 'RUNNING';
    d.message = 'Job is currently running.';
    d.start_time = job.created + script.pendingMs;
    d.driver_info = { id: '02000000', node_ip_address: '10.0.0.2', pid: '4242' };
  }
  if (shown === script.lines.length && runningFor >= script.lines.length * script.lineIntervalMs) {
    d.status = script.outcome;
    d.end_time = job.created + script.pendingMs + script.lines.length * script.lineIntervalMs;
    d.driver_exit_code = script.exitCode;
    if (script.outcome === 'FAILED') {
      d.message = `Job entrypoint command failed with exit code ${script.exitCode}, last available logs (truncated to 20,000 chars):\n${logs}`;
      d.error_type = 'JOB_ENTRYPOINT_COMMAND_ERROR';
    } else {
      d.message = 'Job finished successfully.';
    }
  }
  return { details: d, logs };
}

const VERSION = {
  version: '4.0.0',
  ray_version: '2.53.0',
  ray_commit: '0de2118f3e8e4b4a8e6b1c9d0f7a2b3c4d5e6f70',
  session_name: 'session_2026-08-21_10-00-00_000000_1',
};

/** The cluster's own driver job, listed beside the submissions (never one of them). */
const DRIVER_JOB: JobDetails = {
  type: 'DRIVER',
  job_id: '01000000',
  submission_id: null,
  driver_info: { id: '01000000', node_ip_address: '10.0.0.2', pid: '100' },
  status: 'SUCCEEDED',
  entrypoint: '',
  message: null,
  error_type: null,
  start_time: 1_700_000_000_000,
  end_time: 1_700_000_005_000,
  metadata: {},
  runtime_env: {},
  driver_agent_http_address: null,
  driver_node_id: null,
  driver_exit_code: null,
};

function isDone(status: JobStatus): boolean {
  return status === 'STOPPED' || status === 'SUCCEEDED' || status === 'FAILED';
}
