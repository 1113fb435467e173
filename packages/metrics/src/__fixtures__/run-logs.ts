/**
 * Logs of a small two-step run in the real line formats: SGLang decode-batch lines per engine (the
 * queue fills as the rollout starts and drains before training) and slime's perf lines.
 */

const pad = (n: number) => String(n).padStart(2, '0');
const stamp = (ms: number) => {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
};

export const RUN_START = Date.UTC(2026, 7, 21, 10, 0, 0);

/** One engine's log: `lines` decode entries every 2 s over two rollout phases, with noise lines. */
export function sglangEngineLog(options: { lines?: number | undefined; peakQueue?: number | undefined; seed?: number | undefined } = {}): string {
  const n = options.lines ?? 400;
  const peak = options.peakQueue ?? 120;
  const out: string[] = ['[2026-08-21 09:59:58] INFO:     Started server process [4242]'];
  for (let i = 0; i < n; i++) {
    const phase = (i % (n / 2)) / (n / 2); // 0..1 within each step's rollout
    const load = Math.max(0, Math.sin(Math.PI * phase));
    const queued = Math.round(peak * load * load);
    const running = Math.round(20 + 140 * load);
    const usage = (0.2 + 0.78 * load).toFixed(2);
    const t = stamp(RUN_START + i * 2000);
    out.push(
      i % 3 === 0
        ? `[${t} TP0] Decode batch. #running-req: ${running}, #token: ${running * 2100}, token usage: ${usage}, cuda graph: True, gen throughput (token/s): ${(running * 28.5).toFixed(2)}, #queue-req: ${queued}, `
        : `[${t} DP0 TP0] Decode batch [${i * 40}], #running-req: ${running}, #token: ${running * 2100}, token usage: ${usage}, cuda graph: True, gen throughput (token/s): ${(running * 28.5).toFixed(2)}, #queue-req: ${queued}, `,
    );
    if (i % 10 === 5) out.push(`[${t}] INFO:     127.0.0.1:5${i} - "POST /generate HTTP/1.1" 200 OK`);
  }
  return `${out.join('\n')}\n`;
}

/** slime trainer log for two steps (sync mode numbers of a one-engine run) plus the example hook's lines. */
export function slimeTrainerLog(): string {
  return `(RolloutManager pid=2901) [2026-08-21 10:06:40] rollout_metrics.py:88 - perf 0: {'rollout/raw_reward': 0.41, 'perf/rollout_time': 1401.6, 'perf/tokens_per_gpu_per_sec': 812.1}
(RolloutManager pid=2901) [2026-08-21 10:06:40] sglang_rollout.py:402 - [agent] task__1: reward=1.00 exit=Submitted turns=12 elapsed=300.1s segments=1 claim=2.10s agent=250.00s eval=40.00s exec=30.00s(n=14)
(RolloutManager pid=2901) [2026-08-21 10:06:41] sglang_rollout.py:455 - [agent] task__2 aborted: wall_clock_timeout
(RolloutManager pid=2901) [metrics] step=0 pass@1=0.41 pass@2=0.55 pass@4=0.68 pass@8=0.8 num_groups=23
(MegatronTrainRayActor pid=2817) [2026-08-21 10:14:10] train_metric_utils.py:62 - perf 0: {'perf/train_wait_time': 1421.5, 'perf/train_time': 447.5, 'perf/update_weights_time': 18.7, 'perf/step_time': 1869.0, 'perf/wait_time_ratio': 0.7605}
(RolloutManager pid=2901) [2026-08-21 10:27:40] rollout_metrics.py:88 - perf 1: {'rollout/raw_reward': 0.52, 'perf/rollout_time': 1267.9}
(RolloutManager pid=2901) [2026-08-21 10:27:41] sglang_rollout.py:402 - [agent] task__3: reward=0.00 exit=Submitted turns=9 elapsed=200.0s segments=1 claim=1.10s agent=150.00s eval=40.00s exec=20.00s(n=9)
(RolloutManager pid=2901) [metrics] step=1 pass@1=0.52 pass@2=0.66 pass@4=0.77 pass@8=0.86 num_groups=23
(MegatronTrainRayActor pid=2817) [2026-08-21 10:42:00] train_metric_utils.py:62 - perf 1: {'perf/train_wait_time': 1301.3, 'perf/train_time': 396.2, 'perf/update_weights_time': 31.6, 'perf/step_time': 1697.5, 'perf/wait_time_ratio': 0.7666}
`;
}
