/**
 * One shard of the sharded capture proxy, in a worker thread: a whole capture proxy with its own port,
 * tokenizer and engine clients, serving the sessions the main thread placed on it. It reports every
 * event (each recorded turn among them) to the main thread, which keeps the trajectories.
 */
import { receiveMessageOnPort, workerData } from 'node:worker_threads';
import { sglangEngine } from '../../engine/sglang.js';
import { loadTokenizer } from '../../engine/tokenizer/tokenizer.js';
import type { Engine } from '../../engine/types.js';
import { vllmEngine } from '../../engine/vllm.js';
import { sharedTally } from '../connections.js';
import type { ProxyEvents } from '../events.js';
import { startProxyCore } from '../proxy.js';
import { TrajectoryManager } from '../trajectory/manager.js';
import { HandoverGate } from './gate.js';
import type { FromShard, ShardData, ToShard } from './wire.js';

const EVENTS: (keyof ProxyEvents)[] = [
  'turn',
  'sampling:override',
  'turn:abort',
  'turn:error',
  'stream:inexact',
  'turn:retry',
  'turn:interrupted',
  'budget:exhausted',
];

const data = workerData as ShardData;
const report = (message: FromShard) => data.reports.postMessage(message);

/** An error as plain data: its class does not survive the copy, its name, code and message do. */
function plainError(error: Error): Record<string, unknown> {
  return { name: error.name, message: error.message, code: (error as { code?: unknown }).code };
}

interface Local {
  slot: number;
  handovers: number;
  finished: boolean;
}

try {
  const tokenizer = await loadTokenizer(data.tokenizerDir);
  const engines: Engine[] = data.engines.map((e) =>
    e.kind === 'vllm' ? vllmEngine(e.url, e.options) : sglangEngine(e.url, e.options),
  );
  const gate = new HandoverGate(data.cells);
  const local = new Map<string, Local>();
  const release = (id: string, s: Local) => {
    local.delete(id);
    report({ kind: 'released', slot: s.slot });
  };
  const core = await startProxyCore(
    // the main thread keeps the rows; this manager only holds a session's turns while it is open
    { ...data.options, engine: engines, tokenizer, trajectories: new TrajectoryManager() },
    {
      unknownKey: () => {
        for (let m = receiveMessageOnPort(data.control); m; m = receiveMessageOnPort(data.control))
          handle(m.message as ToShard);
      },
      enter(id) {
        const s = local.get(id);
        if (!s || s.finished || !gate.enter(s.slot)) return false;
        s.handovers++;
        return true;
      },
      connections: sharedTally(new Int32Array(data.connections)),
      leave(id) {
        const s = local.get(id);
        if (!s) return;
        s.handovers--;
        gate.leave(s.slot);
        if (s.finished && s.handovers === 0) release(id, s);
      },
    },
  );
  for (const name of EVENTS) {
    core.proxy.events.on(name, (event: object) => {
      const payload = event as Record<string, unknown>;
      const error = payload.error instanceof Error ? { error: plainError(payload.error) } : {};
      report({ kind: 'event', name, payload: { ...payload, ...error } });
    });
  }
  function handle(message: ToShard): void {
    if (message.op === 'open') {
      const { engineUrl, ...options } = message.options;
      const engine = engines.find((e) => e.url === engineUrl);
      core.open(message.id, { ...options, engine }, message.key);
      local.set(message.id, { slot: message.slot, handovers: 0, finished: false });
    } else if (message.op === 'finish') {
      const s = local.get(message.id);
      if (!s) return;
      core.discard(message.id);
      s.finished = true;
      if (s.handovers === 0) release(message.id, s);
    } else {
      // the thread ends here (its tokenizer's encode workers with it)
      void core.proxy.close().then(() => process.exit(0));
    }
  }
  data.control.on('message', handle);
  report({ kind: 'ready', url: core.proxy.url });
} catch (error) {
  report({ kind: 'failed', message: (error as Error).message });
  process.exit(1);
}
