// The stand-in engine's observability in SGLang's formats: Prometheus metrics and decode-batch log lines.
import { LATENCY_BUCKETS, type StandInCore } from './generation.js';

/** Decode throughput (tokens/s), measured over at least 100 ms. */
export class ThroughputMeter {
  #lastGenerated = 0;
  #lastAt = performance.now();
  #value = 0;

  constructor(readonly core: StandInCore) {}

  read(): number {
    const now = performance.now();
    const generated = this.core.scheduler.generated;
    if (now - this.#lastAt >= 100) {
      this.#value = ((generated - this.#lastGenerated) * 1000) / (now - this.#lastAt);
      this.#lastGenerated = generated;
      this.#lastAt = now;
    }
    return this.#value;
  }
}

/** `GET /metrics` in SGLang's names and labels. */
export function metricsText(core: StandInCore, modelName: string, throughput: ThroughputMeter): string {
  const { scheduler, stats, latency } = core;
  const labels = `model_name="${modelName}",engine_type="unified",tp_rank="0",pp_rank="0"`;
  const lines: string[] = [];
  const metric = (name: string, type: string, help: string, value: number) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, `${name}{${labels}} ${value}`);
  };
  metric('sglang:num_running_reqs', 'gauge', 'The number of running requests.', scheduler.running.size);
  metric(
    'sglang:num_queue_reqs',
    'gauge',
    'The number of requests in the waiting queue.',
    scheduler.queue.length + core.held,
  );
  metric('sglang:num_used_tokens', 'gauge', 'The number of used tokens.', scheduler.usedTokens);
  metric('sglang:token_usage', 'gauge', 'The token usage.', scheduler.usedTokens / scheduler.kvTokens);
  metric('sglang:gen_throughput', 'gauge', 'The generation throughput (token/s).', throughput.read());
  metric('sglang:cache_hit_rate', 'gauge', 'The prefix cache hit rate.', 0);
  metric('sglang:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', stats.promptTokens);
  metric(
    'sglang:generation_tokens_total',
    'counter',
    'Number of generation tokens processed.',
    Math.floor(scheduler.generated),
  );
  const h = 'sglang:e2e_request_latency_seconds';
  lines.push(`# HELP ${h} Histogram of End-to-end request latency in seconds`, `# TYPE ${h} histogram`);
  LATENCY_BUCKETS.forEach((b, i) => {
    lines.push(`${h}_bucket{${labels},le="${b}"} ${latency.buckets[i]}`);
  });
  lines.push(`${h}_bucket{${labels},le="+Inf"} ${latency.count}`);
  lines.push(`${h}_sum{${labels}} ${latency.sum}`, `${h}_count{${labels}} ${latency.count}`);
  return `${lines.join('\n')}\n`;
}

/** One SGLang `Decode batch` log line for the current state. */
export function decodeLogLine(core: StandInCore, batch: number, tag: string, throughput: number): string {
  const { scheduler } = core;
  const used = scheduler.usedTokens;
  return (
    `[${logStamp()} ${tag}] Decode batch [${batch}], #running-req: ${scheduler.running.size}, ` +
    `#token: ${used}, token usage: ${(used / scheduler.kvTokens).toFixed(2)}, cuda graph: False, ` +
    `gen throughput (token/s): ${throughput.toFixed(2)}, #queue-req: ${scheduler.queue.length + core.held}, `
  );
}

function logStamp(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
