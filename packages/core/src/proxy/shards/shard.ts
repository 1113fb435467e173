/** One shard of the sharded capture proxy as its main thread sees it: a worker thread, its ports and slots. */
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import { ConfigError } from '../../errors.js';
import { HandoverGate } from './gate.js';
import type { EngineSpec, FromShard, ShardData, ShardProxyOptions } from './wire.js';

// `worker-entry.mjs` loads `worker.ts` in a source checkout; the build makes `shard-worker.js`.
const WORKER_URL = new URL(
  import.meta.url.endsWith('.ts') ? './worker-entry.mjs' : './shard-worker.js',
  import.meta.url,
);

export interface Shard {
  index: number;
  worker: Worker;
  control: MessagePort;
  reports: MessagePort;
  url: string;
  gate: HandoverGate;
  /** Gate slots its finished sessions released, and the next never-used one. */
  free: number[];
  next: number;
  open: number;
  /** Why its thread ended, if it did. */
  exited: string | undefined;
  closed: Promise<void>;
}

/** What every shard starts with. */
export interface ShardSpec {
  tokenizerDir: string;
  engines: readonly EngineSpec[];
  options: ShardProxyOptions;
  /** Most sessions open on one shard at once. */
  capacity: number;
  /** One count of every shard's client sockets (each shard caps its own at its share). */
  connections: SharedArrayBuffer;
}

/** What the main thread does with a shard's reports, and with its thread ending. */
export interface ShardListener {
  report(shard: Shard, message: FromShard): void;
  exited(shard: Shard, cause: string): void;
}

/** Start shard `index` and wait until it listens (rejects with why when it does not start). */
export async function startShard(index: number, spec: ShardSpec, listener: ShardListener): Promise<Shard> {
  const control = new MessageChannel();
  const reports = new MessageChannel();
  const gate = new HandoverGate(spec.capacity);
  const data: ShardData = {
    index,
    tokenizerDir: spec.tokenizerDir,
    engines: spec.engines.map((e) => ({
      kind: e.kind,
      url: e.url,
      options: e.options,
    })),
    options: spec.options,
    cells: gate.cells.buffer as SharedArrayBuffer,
    connections: spec.connections,
    control: control.port2,
    reports: reports.port2,
  };
  let worker: Worker;
  try {
    worker = new Worker(WORKER_URL, { workerData: data, transferList: [control.port2, reports.port2] });
  } catch (error) {
    throw new ConfigError(
      `startShardedCaptureProxy: options cannot cross to a shard: ${(error as Error).message}`,
    );
  }
  let exitCause: string | undefined;
  worker.on('error', (error) => {
    exitCause = error.message;
  });
  const url = await new Promise<string>((resolve, reject) => {
    reports.port1.once('message', (m: FromShard) => {
      if (m.kind === 'ready') resolve(m.url);
      else
        reject(new ConfigError(`shard ${index} did not start: ${m.kind === 'failed' ? m.message : m.kind}`));
    });
    worker.once('exit', (code) =>
      reject(
        new ConfigError(`shard ${index} did not start: ${exitCause ?? `its thread exited with ${code}`}`),
      ),
    );
  });
  const shard: Shard = {
    index,
    worker,
    control: control.port1,
    reports: reports.port1,
    url,
    gate,
    free: [],
    next: 0,
    open: 0,
    exited: undefined,
    closed: new Promise((resolve) => worker.once('exit', () => resolve())),
  };
  reports.port1.on('message', (m: FromShard) => listener.report(shard, m));
  worker.once('exit', (code) => listener.exited(shard, exitCause ?? `its thread exited with ${code}`));
  return shard;
}

/** Start `count` shards; when one fails, stop those that started and throw its reason. */
export async function startShards(count: number, spec: ShardSpec, listener: ShardListener): Promise<Shard[]> {
  const started = await Promise.allSettled(
    Array.from({ length: count }, (_, i) => startShard(i, spec, listener)),
  );
  const shards = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await Promise.all(shards.map((s) => s.worker.terminate()));
    throw failed.reason;
  }
  return shards;
}
