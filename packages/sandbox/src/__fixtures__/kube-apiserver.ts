// A STAND-IN for a Kubernetes API server and its kubelet, for this package's tests only: no real API
// server can run on the test machines. It is a real HTTP and WebSocket server on loopback that follows
// the Kubernetes API conventions the official client relies on: the REST paths of pods and of
// agent-sandbox's custom resources, `Status` objects for errors (404 NotFound, 409 AlreadyExists, 422
// Invalid, 429 TooManyRequests with Retry-After), label selectors, and the `exec` subresource over
// WebSocket (`v5.channel.k8s.io` / `v4.channel.k8s.io`: channel-prefixed binary frames, the status
// channel's JSON `Status`, v5's stdin close frame `255 0`; kubernetes/kubernetes
// staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go @ 773559c09fdbb35e0a2e64b0edb68424eecf1c5a
// for the protocol names and channels, client-go/tools/remotecommand/v4.go @
// 01c557f1f07ecb1c033cd3112638ff416264f0db for the exit status). A pod is
// a folder on this host: its commands run as real processes under bubblewrap with that folder as `/`
// (the host's /usr and /etc read-only), in this host's pid namespace, so a process left by one exec is
// visible to the next, as in a container. It starts pods at once, honours `activeDeadlineSeconds` as the
// kubelet does (phase Failed, reason DeadlineExceeded), and does NOT enforce resources (no cgroups): the
// tests check what the provider sends, and the ulimits the provider's prelude sets inside the pod.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { constants } from 'node:os';
import { KubeConfig } from '@kubernetes/client-node';
import { WebSocketServer, type WebSocket } from 'ws';
import { killByEnv } from '../process-markers.js';
import { AgentSandboxController, CUSTOM_RESOURCES } from './kube-agent-sandbox.js';
import { type KubeObject, StatusError, selects, statusBody, validateMeta } from './kube-objects.js';

/** The environment marker of every process of one stand-in pod (what a pod's deletion kills). */
const POD_MARKER = 'VIME_STANDIN_POD';

/** A request the stand-in served: method, path and answer status (what the tests inspect). */
export interface ServedRequest {
  method: string;
  path: string;
  status: number;
}

interface PodState {
  object: KubeObject;
  root: string;
  deadline?: NodeJS.Timeout | undefined;
  processes: Set<ChildProcess>;
}

/** The stand-in server: its URL, a kubeconfig for it, its pods, and knobs the tests turn. */
export class StandinApiServer {
  readonly requests: ServedRequest[] = [];
  readonly pods = new Map<string, PodState>();
  readonly custom = new Map<string, KubeObject>();
  readonly controller: AgentSandboxController;
  /** Answer the next `count` requests matching `match` with 429 and `Retry-After: retryAfterSeconds`. */
  /** Images the stand-in kubelet cannot pull: their pods wait with `ErrImagePull`, as a real kubelet reports. */
  readonly unpullable = new Set<string>();
  throttle: { count: number; retryAfterSeconds: number; match: (method: string, path: string) => boolean } | undefined;
  readonly #server: Server;
  readonly #wss = new WebSocketServer({
    noServer: true,
    handleProtocols: (protocols) =>
      protocols.has('v5.channel.k8s.io') ? 'v5.channel.k8s.io' : protocols.has('v4.channel.k8s.io') ? 'v4.channel.k8s.io' : false,
  });
  readonly #root = mkdtempSync(join(tmpdir(), 'vime-kube-standin-'));
  #resourceVersion = 1;
  url = '';

  constructor() {
    this.controller = new AgentSandboxController(this);
    this.#server = createServer((req, res) => void this.#serve(req, res));
    this.#server.on('upgrade', (req, socket, head) => this.#upgrade(req, socket as Socket, head));
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  /** A kubeconfig for this server (plain HTTP on loopback, a token the server does not check). */
  kubeConfig(namespace = 'vime-test'): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'standin', server: this.url, skipTLSVerify: true }],
      users: [{ name: 'standin', token: 'standin-token' }],
      contexts: [{ name: 'standin', cluster: 'standin', user: 'standin', namespace }],
      currentContext: 'standin',
    });
    return kc;
  }

  nextVersion(): string {
    return String(this.#resourceVersion++);
  }

  async close(): Promise<void> {
    for (const key of [...this.pods.keys()]) this.deletePod(key);
    this.controller.close();
    for (const ws of this.#wss.clients) ws.terminate();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    rmSync(this.#root, { recursive: true, force: true });
  }

  #throttled(method: string, path: string): number | undefined {
    const t = this.throttle;
    if (!t || t.count <= 0 || !t.match(method, path)) return undefined;
    t.count--;
    return t.retryAfterSeconds;
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    const method = req.method ?? 'GET';
    const answer = (status: number, body: KubeObject, headers: Record<string, string> = {}) => {
      this.requests.push({ method, path: url.pathname, status });
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    const wait = this.#throttled(method, url.pathname);
    if (wait !== undefined) {
      return answer(429, statusBody(429, 'TooManyRequests', 'Too many requests, please try again later.'), {
        'retry-after': String(wait),
      });
    }
    try {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = chunks.length ? (JSON.parse(Buffer.concat(chunks).toString()) as KubeObject) : undefined;
      const { status, object } = this.#route(method, url, body);
      answer(status, object);
    } catch (error) {
      if (error instanceof StatusError) answer(error.code, statusBody(error.code, error.reason, error.message));
      else answer(500, statusBody(500, 'InternalError', String(error)));
    }
  }

  #route(method: string, url: URL, body: KubeObject | undefined): { status: number; object: KubeObject } {
    const parts = url.pathname.split('/').filter(Boolean);
    // /api/v1/namespaces/{ns}/pods[/{name}]
    if (parts[0] === 'api' && parts[1] === 'v1' && parts[2] === 'namespaces' && parts[4] === 'pods') {
      return this.#pods(method, parts[3]!, parts[5], url, body);
    }
    // /apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}]
    if (parts[0] === 'apis' && parts[3] === 'namespaces') {
      const resource = `${parts[1]}/${parts[2]}/${parts[5]}`;
      const kind = CUSTOM_RESOURCES[resource];
      if (kind) return this.controller.route(method, resource, kind, parts[4]!, parts[6], url, body);
    }
    throw new StatusError(404, 'NotFound', 'the server could not find the requested resource');
  }

  #pods(method: string, ns: string, name: string | undefined, url: URL, body: KubeObject | undefined) {
    if (name === undefined && method === 'POST') return { status: 201, object: this.createPod(ns, body ?? {}) };
    if (name === undefined && method === 'GET') {
      const items = [...this.pods.values()]
        .map((p) => p.object)
        .filter((o) => o.metadata.namespace === ns && selects(url.searchParams.get('labelSelector'), o.metadata.labels));
      return { status: 200, object: { kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: this.nextVersion() }, items } };
    }
    const pod = name === undefined ? undefined : this.pods.get(`${ns}/${name}`);
    if (!pod) throw new StatusError(404, 'NotFound', `pods "${name}" not found`);
    if (method === 'GET') return { status: 200, object: pod.object };
    if (method === 'DELETE') return { status: 200, object: this.deletePod(`${ns}/${name}`) };
    throw new StatusError(405, 'MethodNotAllowed', `${method} is not supported on pods`);
  }

  /** Create a pod (validated as the API server would) and start it as the kubelet would. */
  createPod(ns: string, body: KubeObject): KubeObject {
    validateMeta('Pod', body.metadata);
    const containers = body.spec?.containers;
    if (!Array.isArray(containers) || containers.length === 0 || containers.some((c) => !c?.name || !c?.image)) {
      throw new StatusError(422, 'Invalid', `Pod "${body.metadata.name}" is invalid: spec.containers: Required value`);
    }
    const key = `${ns}/${body.metadata.name}`;
    if (this.pods.has(key)) throw new StatusError(409, 'AlreadyExists', `pods "${body.metadata.name}" already exists`);
    const uid = randomUUID();
    const object: KubeObject = {
      ...body,
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { ...body.metadata, namespace: ns, uid, creationTimestamp: new Date().toISOString(), resourceVersion: this.nextVersion() },
      status: { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'True' }] },
    };
    const root = join(this.#root, uid);
    const state: PodState = { object, root, processes: new Set() };
    this.pods.set(key, state);
    setTimeout(() => this.#startPod(state), 20).unref();
    return object;
  }

  #startPod(state: PodState): void {
    const { object } = state;
    if (object.metadata.deletionTimestamp) return;
    const container = object.spec.containers[0];
    if (this.unpullable.has(container.image)) {
      const waiting = { reason: 'ErrImagePull', message: `failed to pull image "${container.image}": not found` };
      object.status.containerStatuses = [{ name: container.name, image: container.image, ready: false, state: { waiting } }];
      return;
    }
    mkdirSync(join(state.root, 'tmp'), { recursive: true, mode: 0o1777 });
    mkdirSync(join(state.root, container.workingDir ?? '/'), { recursive: true });
    // The image's layout: a merged /usr, as Debian's.
    for (const d of ['bin', 'lib', 'lib64', 'sbin']) symlinkSync(`usr/${d}`, join(state.root, d));
    const now = new Date().toISOString();
    object.status = {
      phase: 'Running',
      startTime: now,
      podIP: `10.244.0.${1 + (this.pods.size % 250)}`,
      conditions: [{ type: 'Ready', status: 'True' }],
      containerStatuses: [{ name: container.name, image: container.image, ready: true, restartCount: 0, state: { running: { startedAt: now } } }],
    };
    object.metadata.resourceVersion = this.nextVersion();
    const deadline = object.spec.activeDeadlineSeconds;
    if (typeof deadline === 'number') {
      // The kubelet's active deadline: counted from the pod's start, then every container is killed.
      state.deadline = setTimeout(() => this.#deadlineExceeded(state), deadline * 1000);
      state.deadline.unref();
    }
    this.controller.reconcile();
  }

  #deadlineExceeded(state: PodState): void {
    this.#killProcesses(state);
    state.object.status = {
      ...state.object.status,
      phase: 'Failed',
      reason: 'DeadlineExceeded',
      message: 'Pod was active on the node longer than the specified deadline',
      containerStatuses: state.object.status.containerStatuses.map((c: KubeObject) => ({
        ...c,
        ready: false,
        state: { terminated: { exitCode: 137, reason: 'Error', finishedAt: new Date().toISOString() } },
      })),
    };
    state.object.metadata.resourceVersion = this.nextVersion();
    this.controller.reconcile();
  }

  #killProcesses(state: PodState): void {
    for (const p of state.processes) p.kill('SIGKILL');
    killByEnv(POD_MARKER, state.object.metadata.uid);
  }

  /** Delete a pod: its processes are killed and its folder removed (no grace period). */
  deletePod(key: string): KubeObject {
    const state = this.pods.get(key);
    if (!state) throw new StatusError(404, 'NotFound', `pods "${key}" not found`);
    state.object.metadata.deletionTimestamp = new Date().toISOString();
    clearTimeout(state.deadline);
    this.#killProcesses(state);
    this.pods.delete(key);
    rmSync(state.root, { recursive: true, force: true });
    this.controller.reconcile();
    return state.object;
  }

  /** The exec subresource: refuse before the upgrade as the API server does, then stream. */
  #upgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    const url = new URL(req.url ?? '/', this.url);
    const parts = url.pathname.split('/').filter(Boolean);
    const refuse = (code: number, reason: string, message: string, headers: Record<string, string> = {}) => {
      this.requests.push({ method: 'GET', path: url.pathname, status: code });
      const body = JSON.stringify(statusBody(code, reason, message));
      const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
      socket.end(`HTTP/1.1 ${code} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`);
    };
    const wait = this.#throttled('GET', url.pathname);
    if (wait !== undefined) return refuse(429, 'TooManyRequests', 'Too many requests', { 'retry-after': String(wait) });
    if (!(parts[0] === 'api' && parts[2] === 'namespaces' && parts[4] === 'pods' && parts[6] === 'exec')) {
      return refuse(404, 'NotFound', 'the server could not find the requested resource');
    }
    const state = this.pods.get(`${parts[3]}/${parts[5]}`);
    if (!state) return refuse(404, 'NotFound', `pods "${parts[5]}" not found`);
    if (state.object.status.phase !== 'Running') {
      return refuse(400, 'BadRequest', `cannot exec into a container in a completed pod; current phase is ${state.object.status.phase}`);
    }
    this.#wss.handleUpgrade(req, socket, head, (ws) => {
      this.requests.push({ method: 'GET', path: url.pathname, status: 101 });
      this.#exec(state, ws, url.searchParams);
    });
  }

  #exec(state: PodState, ws: WebSocket, query: URLSearchParams): void {
    const argv = query.getAll('command');
    const container = state.object.spec.containers.find((c: KubeObject) => c.name === query.get('container')) ?? state.object.spec.containers[0];
    const env = ['--setenv', 'PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', '--setenv', POD_MARKER, state.object.metadata.uid];
    for (const e of container.env ?? []) env.push('--setenv', e.name, e.value ?? '');
    const sys = ['/usr', '/etc'].flatMap((d) => ['--ro-bind', d, d]);
    const child = spawn(
      'bwrap',
      [
        '--bind', state.root, '/', ...sys, '--proc', '/proc', '--dev', '/dev',
        '--unshare-net', '--unshare-ipc', '--unshare-uts', '--hostname', state.object.metadata.name.slice(0, 63),
        '--clearenv', ...env, '--chdir', container.workingDir ?? '/', '--', ...argv,
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    state.processes.add(child);
    const frame = (channel: number, data: Buffer) => {
      if (ws.readyState === ws.OPEN) ws.send(Buffer.concat([Buffer.from([channel]), data]));
    };
    child.stdout.on('data', (d: Buffer) => frame(1, d));
    child.stderr.on('data', (d: Buffer) => frame(2, d));
    child.stdin.on('error', () => {});
    if (query.get('stdin') !== 'true') child.stdin.end();
    ws.on('message', (data: Buffer) => {
      if (data[0] === 0) child.stdin.write(data.subarray(1));
      else if (data[0] === 255 && data[1] === 0) child.stdin.end();
    });
    child.on('error', (error) => {
      frame(3, Buffer.from(JSON.stringify({ metadata: {}, status: 'Failure', message: String(error), reason: 'InternalError' })));
      ws.close(1000);
    });
    child.on('close', (code, signal) => {
      state.processes.delete(child);
      const exitCode = code ?? 128 + (signal ? constants.signals[signal] : 0);
      // The kubelet's status for an exec: Success, or NonZeroExitCode with the code as the ExitCode cause.
      const status =
        exitCode === 0
          ? { metadata: {}, status: 'Success' }
          : {
              metadata: {},
              status: 'Failure',
              message: `command terminated with non-zero exit code: error executing command [${argv.join(' ')}], exit code ${exitCode}`,
              reason: 'NonZeroExitCode',
              details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
            };
      frame(3, Buffer.from(JSON.stringify(status)));
      ws.close(1000);
    });
  }
}

/** Start a stand-in API server on loopback. */
export async function startStandinApiServer(): Promise<StandinApiServer> {
  return new StandinApiServer().listen();
}
