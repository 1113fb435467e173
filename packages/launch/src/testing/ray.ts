/**
 * A Ray dashboard stand-in on loopback that answers the Jobs REST API with Ray's recorded shapes and
 * texts (`ray/dashboard/modules/job/job_head.py`, `common.py`, token auth, the browser-traffic guard).
 * Jobs follow a script: PENDING, then RUNNING while log lines appear, then SUCCEEDED or FAILED.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { JobDetails, JobStatus } from '../ray/types.js';

export interface FakeJobScript {
  /** Milliseconds in PENDING before the driver starts. */
  pendingMs?: number;
  /** Log lines, one emitted every `lineIntervalMs` while RUNNING. */
  lines?: string[];
  lineIntervalMs?: number;
  /** Outcome once every line is out; FAILED carries `exitCode`. */
  outcome?: 'SUCCEEDED' | 'FAILED';
  exitCode?: number;
}

export interface FakeRayOptions {
  /** Require `Authorization: Bearer <token>` (RAY_AUTH_MODE=token). */
  token?: string;
  /** Answer this many submissions with 500 "No available agent..." first (agent still registering). */
  agentMissingFor?: number;
  /** How a duplicate submission_id is answered: 400 from the agent, or 500 wrapped by the head. */
  duplicateStatus?: 400 | 500;
  /** Script for every job, or per entrypoint. */
  script?: FakeJobScript | ((entrypoint: string) => FakeJobScript);
  /** Listen on this port (default: any free one). */
  port?: number;
}

export interface FakeRay {
  url: string;
  /** Every request received: method, path and headers. */
  requests: Array<{ method: string; path: string; headers: IncomingMessage['headers'] }>;
  /** Submission ids in the order jobs were created (i.e. actually started). */
  created: string[];
  /** Client connections open right now (a client that closes its pool leaves none). */
  openConnections(): Promise<number>;
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
  script: Required<FakeJobScript>;
  created: number;
  stoppedAt?: number;
}

function traceback(error: string): string {
  return `Traceback (most recent call last):\n  File "/ray/dashboard/modules/job/job_head.py", line 412, in submit_job\n    resp = await job_agent_client.submit_job_internal(submit_request)\n${error}\n`;
}

export async function startFakeRay(options: FakeRayOptions = {}): Promise<FakeRay> {
  const jobs = new Map<string, FakeJob>();
  const requests: FakeRay['requests'] = [];
  const created: string[] = [];
  let agentMissing = options.agentMissingFor ?? 0;
  const scriptFor = (entrypoint: string): Required<FakeJobScript> => {
    const s = typeof options.script === 'function' ? options.script(entrypoint) : (options.script ?? {});
    return {
      pendingMs: s.pendingMs ?? 50,
      lines: s.lines ?? ['hello from the job'],
      lineIntervalMs: s.lineIntervalMs ?? 20,
      outcome: s.outcome ?? 'SUCCEEDED',
      exitCode: s.exitCode ?? (s.outcome === 'FAILED' ? 1 : 0),
    };
  };

  // Advance a job along its script to "now".
  const observe = (job: FakeJob): { details: JobDetails; logs: string } => {
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
  };

  const driverJob: JobDetails = {
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

  const server: Server = createServer(async (req, res) => {
    const method = req.method ?? 'GET';
    const path = (req.url ?? '/').split('?')[0]!;
    requests.push({ method, path, headers: req.headers });
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = (status: number, body: string) =>
      res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' }).end(body);
    const json = (status: number, body: unknown) =>
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body));

    // Browser-traffic guard (Ray >= 2.52): POST/PUT that look like a browser are refused.
    if (method === 'POST' || method === 'PUT') {
      const h = req.headers;
      const browser =
        BROWSER_HEADERS.some((name) => h[name] !== undefined) ||
        Object.keys(h).some((k) => k.startsWith('access-control-request-')) ||
        /^Mozilla/.test(h['user-agent'] ?? '');
      if (browser) return text(405, 'Method Not Allowed for browser traffic.');
    }
    if (options.token !== undefined) {
      const auth = req.headers.authorization ?? req.headers['x-ray-authorization'];
      const presented = typeof auth === 'string' ? auth.replace(/^Bearer\s+/i, '') : undefined;
      if (!presented) return text(401, 'Unauthorized: Missing authentication token');
      if (presented !== options.token) return text(403, 'Forbidden: Invalid authentication token');
    }

    if (method === 'GET' && path === '/api/version') {
      return json(200, {
        version: '4.0.0',
        ray_version: '2.53.0',
        ray_commit: '0de2118f3e8e4b4a8e6b1c9d0f7a2b3c4d5e6f70',
        session_name: 'session_2026-08-21_10-00-00_000000_1',
      });
    }
    if (method === 'POST' && path === '/api/jobs/') {
      if (agentMissing > 0) {
        agentMissing--;
        return text(500, 'No available agent to submit job, please try again later.');
      }
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      } catch {
        return text(
          400,
          traceback('json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)'),
        );
      }
      const unknown = Object.keys(body).find((k) => !SUBMIT_KEYS.has(k));
      if (unknown) {
        return text(
          400,
          traceback(`TypeError: JobSubmitRequest.__init__() got an unexpected keyword argument '${unknown}'`),
        );
      }
      if (typeof body.entrypoint !== 'string') {
        return text(
          400,
          traceback(
            "TypeError: JobSubmitRequest.__init__() missing 1 required positional argument: 'entrypoint'",
          ),
        );
      }
      const id =
        (body.submission_id as string | undefined) ??
        (body.job_id as string | undefined) ??
        `raysubmit_${randomBytes(8).toString('hex').slice(0, 16)}`;
      if (jobs.has(id)) {
        const error = `ValueError: Job with submission_id ${id} already exists. Please use a different submission_id.`;
        return options.duplicateStatus === 400
          ? text(400, traceback(error))
          : text(500, traceback(`RuntimeError: Request failed with status code 400: ${traceback(error)}.`));
      }
      const now = Date.now();
      jobs.set(id, {
        created: now,
        script: scriptFor(body.entrypoint),
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
      created.push(id);
      return json(200, { job_id: id, submission_id: id });
    }
    if (method === 'GET' && path === '/api/jobs/') {
      return json(200, [...[...jobs.values()].map((j) => observe(j).details), driverJob]);
    }
    const match = /^\/api\/jobs\/([^/]+)(\/logs|\/stop)?$/.exec(path);
    if (match) {
      const id = decodeURIComponent(match[1]!);
      if (id === driverJob.job_id && match[2]) {
        return text(400, `Can only ${match[2] === '/logs' ? 'get logs of' : 'stop'} submission type jobs`);
      }
      const job = jobs.get(id);
      if (!job) return text(404, `Job ${id} does not exist`);
      const { details, logs } = observe(job);
      if (method === 'GET' && !match[2]) return json(200, details);
      if (method === 'GET' && match[2] === '/logs') return json(200, { logs });
      if (method === 'POST' && match[2] === '/stop') {
        if (isDone(details.status)) return json(200, { stopped: false });
        job.stoppedAt = Date.now();
        details.status = 'STOPPED';
        details.message = 'Job was intentionally stopped.';
        details.end_time = job.stoppedAt;
        return json(200, { stopped: true });
      }
      if (method === 'DELETE' && !match[2]) {
        if (!isDone(details.status)) {
          return text(
            500,
            traceback(
              `RuntimeError: Attempted to delete job '${id}', but it is in a non-terminal state ${details.status}.`,
            ),
          );
        }
        jobs.delete(id);
        return json(200, { deleted: true });
      }
    }
    return text(404, '404: Not Found');
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    created,
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

function isDone(status: JobStatus): boolean {
  return status === 'STOPPED' || status === 'SUCCEEDED' || status === 'FAILED';
}
