/**
 * A capture proxy in a process of its own, for the attack suites that measure what the proxy's process
 * spends (its peak resident memory, its open descriptors) or that need a real descriptor limit (the test
 * starts it under `prlimit`). The engine runs in the test's process; the test drives this one over IPC.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { sglangEngine } from '../engine/sglang.js';
import { startCaptureProxy } from '../proxy/proxy.js';
import type { ProxyLimits } from '../proxy/server.js';
import { startShardedCaptureProxy } from '../proxy/shards/sharded.js';
import { QWEN3_DIR, qwen3 } from './tokenizer.js';

export interface ProxyProcessConfig {
  mode: 'single' | 'sharded';
  engineUrl: string;
  limits?: ProxyLimits | undefined;
}

export type ProxyProcessCommand =
  | { op: 'open'; session: string }
  | { op: 'stats' }
  /** Forget the peak so far: the next `stats` reports the peak from now on. */
  | { op: 'resetPeak' };

export type ToProxyProcess = { id: number } & ProxyProcessCommand;

export interface ProxyProcessStats {
  /** Resident memory now, and its peak since the last `resetPeak` (the kernel's high-water mark). */
  rss: number;
  peakRss: number;
  /** Open descriptors of the process, and the most seen by the sampler since `resetPeak`. */
  fds: number;
  peakFds: number;
  connections: number;
  maxConnections: number;
  /** The soft open-file limit the process runs under. */
  nofile: number;
}

const kib = (field: string) =>
  1024 * Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
const fdCount = () => readdirSync('/proc/self/fd').length;
const nofile = () => Number(/Max open files\s+(\d+)/.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1]);

const config = JSON.parse(process.env.VIME_PROXY_PROCESS!) as ProxyProcessConfig;

async function start() {
  if (config.mode === 'single') {
    const proxy = await startCaptureProxy({
      engine: sglangEngine(config.engineUrl),
      tokenizer: await qwen3(),
      limits: config.limits,
    });
    return { proxy, urls: [proxy.url] };
  }
  const proxy = await startShardedCaptureProxy({
    shards: 2,
    engines: [{ kind: 'sglang', url: config.engineUrl }],
    tokenizerDir: QWEN3_DIR,
    limits: config.limits,
  });
  return { proxy, urls: proxy.urls };
}

const { proxy, urls } = await start();
let peakFds = 0;
// descriptors are sampled (the kernel keeps no high-water mark of them)
setInterval(() => {
  try {
    peakFds = Math.max(peakFds, fdCount());
  } catch {
    peakFds = Number.POSITIVE_INFINITY; // out of descriptors: reading the folder takes one
  }
}, 5).unref();

process.on('message', (m: ToProxyProcess) => {
  let result: unknown;
  if (m.op === 'open') {
    const s = proxy.openSession(m.session);
    result = { id: s.id, apiKey: s.apiKey, baseURL: s.baseURL };
  } else if (m.op === 'resetPeak') {
    writeFileSync('/proc/self/clear_refs', '5');
    peakFds = fdCount();
    result = true;
  } else {
    const fds = fdCount();
    peakFds = Math.max(peakFds, fds);
    result = {
      rss: kib('VmRSS'),
      peakRss: kib('VmHWM'),
      fds,
      peakFds,
      connections: proxy.connections,
      maxConnections: (proxy as { maxConnections?: number }).maxConnections ?? Number.NaN,
      nofile: nofile(),
    } satisfies ProxyProcessStats;
  }
  process.send?.({ id: m.id, result });
});
process.send?.({ ready: true, urls, pid: process.pid });
process.on('disconnect', () => process.exit(0));
