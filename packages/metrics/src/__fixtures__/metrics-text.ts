/**
 * `/metrics` bodies in the exact exposition shape prometheus_client gives SGLang and vLLM (HELP/TYPE
 * lines, `_total` counters with `_created` twins, cumulative `_bucket{le=…}` histograms with `_sum` and
 * `_count`, label sets per rank/engine). Values are parameters so tests can script load over time.
 */

export interface LoadState {
  running: number;
  queued: number;
  kvUsage: number;
  promptTokens: number;
  generationTokens: number;
  /** Cumulative TTFT bucket counts for le = 0.1, 0.25, 0.5, 1, 2.5, +Inf. */
  ttft: [number, number, number, number, number, number];
  ttftSum: number;
}

const LE = ['0.1', '0.25', '0.5', '1.0', '2.5', '+Inf'];

export function sglangMetrics(s: LoadState, model = 'Qwen/Qwen3-14B'): string {
  const labels = `engine_type="unified",model_name="${model}",pp_rank="0",tp_rank="0"`;
  return `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{${labels}} ${s.running.toFixed(1)}
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{${labels}} 123456.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{${labels}} ${s.kvUsage}
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{${labels}} 4594.01
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{${labels}} ${s.queued.toFixed(1)}
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{${labels}} 0.625
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{${labels}} ${s.promptTokens.toFixed(1)}
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{${labels}} ${s.generationTokens.toFixed(1)}
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
${LE.map((le, i) => `sglang:time_to_first_token_seconds_bucket{${labels.replace('model_name', `le="${le}",model_name`)}} ${s.ttft[i]!.toFixed(1)}`).join('\n')}
sglang:time_to_first_token_seconds_sum{${labels}} ${s.ttftSum}
sglang:time_to_first_token_seconds_count{${labels}} ${s.ttft[5].toFixed(1)}
`;
}

/** vLLM V1 with two engine cores (`engine="0"`, `engine="1"`): the load is split between them. */
export function vllmMetrics(s: LoadState, model = 'Qwen/Qwen3-14B'): string {
  const engines = ['0', '1'];
  const split = (v: number, i: number) => (i === 0 ? Math.ceil(v / 2) : Math.floor(v / 2));
  const lines: string[] = [];
  const family = (name: string, type: string, help: string, value: (i: number) => number | string) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    engines.forEach((e, i) => {
      lines.push(`${name}{engine="${e}",model_name="${model}"} ${value(i)}`);
    });
  };
  family('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', (i) => split(s.running, i).toFixed(1));
  family('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', (i) => split(s.queued, i).toFixed(1));
  family('vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', (i) => (i === 0 ? s.kvUsage : s.kvUsage / 2));
  lines.push('# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.');
  lines.push('# TYPE vllm:prefix_cache_queries_total counter');
  engines.forEach((e) => {
    lines.push(`vllm:prefix_cache_queries_total{engine="${e}",model_name="${model}"} ${(s.promptTokens / 2).toFixed(1)}`);
  });
  lines.push('# TYPE vllm:prefix_cache_hits_total counter');
  engines.forEach((e) => {
    lines.push(`vllm:prefix_cache_hits_total{engine="${e}",model_name="${model}"} ${(s.promptTokens / 8).toFixed(1)}`);
  });
  family('vllm:num_preemptions_total', 'counter', 'Cumulative number of preemption from the engine.', () => '2.0');
  family('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', (i) => split(s.promptTokens, i).toFixed(1));
  family('vllm:prompt_tokens_created', 'gauge', 'Number of prefill tokens processed.', () => '1.7592e+09');
  family('vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.', (i) => split(s.generationTokens, i).toFixed(1));
  lines.push('# HELP vllm:request_success_total Count of successfully processed requests.');
  lines.push('# TYPE vllm:request_success_total counter');
  lines.push(`vllm:request_success_total{engine="0",finished_reason="stop",model_name="${model}"} 10.0`);
  lines.push(`vllm:request_success_total{engine="0",finished_reason="length",model_name="${model}"} 2.0`);
  lines.push('# HELP vllm:num_requests_waiting_by_reason Waiting requests by reason (a look-alike name).');
  lines.push('# TYPE vllm:num_requests_waiting_by_reason gauge');
  lines.push(`vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 99.0`);
  lines.push('# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.');
  lines.push('# TYPE vllm:time_to_first_token_seconds histogram');
  engines.forEach((e, i) => {
    LE.forEach((le, j) => {
      lines.push(`vllm:time_to_first_token_seconds_bucket{engine="${e}",le="${le}",model_name="${model}"} ${split(s.ttft[j]!, i).toFixed(1)}`);
    });
    lines.push(`vllm:time_to_first_token_seconds_count{engine="${e}",model_name="${model}"} ${split(s.ttft[5], i).toFixed(1)}`);
    lines.push(`vllm:time_to_first_token_seconds_sum{engine="${e}",model_name="${model}"} ${(s.ttftSum / 2).toFixed(3)}`);
  });
  return `${lines.join('\n')}\n`;
}
