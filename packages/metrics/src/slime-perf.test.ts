import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parsePythonLiteral } from './python-literal.js';
import { agentResults, parseSlimePerfLog } from './slime-perf.js';

// `ray job logs` output of a slime run: Ray actor prefixes, slime's logger format, both perf lines per
// step, the coding-agent example's [agent]/[metrics] lines, and unrelated noise.
const LOG = `2026-08-21 10:40:00,123\tINFO job_manager.py:531 -- Runtime env is setting up.
(RolloutManager pid=2901) [2026-08-21 11:00:01] rollout_metrics.py:88 - perf 0: {'rollout/raw_reward': 0.375, 'rollout/response_lengths': 812.25, 'perf/rollout_time': 1401.6, 'perf/tokens_per_gpu_per_sec': 812.1, 'perf/non_generation_time/mean': 12.5, 'perf/request/e2e_latency/max': nan, 'rollout/pass@1': 0.375, 'rollout/pass@8': 0.75, 'rollout/truncated_ratio': 0.0}
(RolloutManager pid=2901) [2026-08-21 11:00:02] sglang_rollout.py:402 - [agent] pydantic__1234: reward=1.00 exit=Submitted turns=12 elapsed=300.1s segments=1 claim=2.10s agent=250.00s eval=40.00s exec=30.00s(n=14)
(RolloutManager pid=2901) [2026-08-21 11:00:03] sglang_rollout.py:402 - [agent] pydantic__1234: reward=0.00 exit=LimitsExceeded turns=40 elapsed=900.0s segments=3 claim=2.10s agent=850.00s eval=40.00s exec=300.00s(n=70)
(RolloutManager pid=2901) [2026-08-21 11:00:04] sglang_rollout.py:455 - [agent] pydantic__1234 aborted: wall_clock_timeout
(RolloutManager pid=2901) [metrics] step=0 pass@1=0.4 pass@k=0.75 num_groups=23 turns/mean=14.2 sandbox_claim_sec/p50=2.1
(MegatronTrainRayActor pid=2817) [2026-08-21 11:07:30] train_metric_utils.py:62 - perf 0: {'perf/train_wait_time': 1421.5, 'perf/train_time': 447.5, 'perf/update_weights_time': 18.7, 'perf/data_preprocess_time': 1.25, 'perf/log_probs_time': 20.5, 'perf/actor_train_time': 401.0, 'perf/step_time': 1869.0, 'perf/wait_time_ratio': 0.7605, 'perf/actor_train_tflops': 123.4, 'perf/actor_train_tok_per_s': 9876.5}
(MegatronTrainRayActor pid=2817) [2026-08-21 11:07:31] actor.py:310 - Timer update_weights start
[2026-08-21 11:35:02] rollout_metrics.py:88 - perf 1: {'rollout/raw_reward': 0.5, 'perf/rollout_time': 1267.9, 'perf/longest_sample_tokens_per_sec': np.float64(33.5), 'meta': {'engines': [1, 2], 'ok': True, 'note': None}}
(MegatronTrainRayActor pid=2817, ip=10.0.0.4) [2026-08-21 11:36:00] train_metric_utils.py:62 - perf 1: {'perf/train_wait_time': 1301.3, 'perf/train_time': 396.2, 'perf/update_weights_time': 31.6, 'perf/step_time': 1697.5, 'perf/wait_time_ratio': 0.7666, 'perf/update_weights_density': 1.2e-05, 'perf/big': inf}
(MegatronTrainRayActor pid=2817) [2026-08-21 11:36:01] train_metric_utils.py:62 - perf 2: {'perf/train_time': 396.2, 'perf/step_ti
(MegatronTrainRayActor pid=2817) [2026-08-21 11:36:02] train_metric_utils.py:62 - perf 3: {'perf/train_time': 396.2,, }
`;

describe('parseSlimePerfLog', () => {
  it('merges the rollout-side and train-side perf lines of each step', () => {
    const r = parseSlimePerfLog(LOG);
    expect(r.steps.map((s) => s.rolloutId)).toEqual([0, 1]);
    expect(r.steps[0]).toMatchObject({
      stepTime: 1869,
      rolloutTime: 1401.6,
      trainTime: 447.5,
      trainWaitTime: 1421.5,
      updateWeightsTime: 18.7,
      waitTimeRatio: 0.7605,
      loggedAt: '2026-08-21 11:07:30',
    });
    expect(r.steps[0]!.metrics['rollout/raw_reward']).toBe(0.375);
    expect(r.steps[0]!.metrics['perf/request/e2e_latency/max']).toBeNaN();
    expect(r.steps[1]).toMatchObject({ stepTime: 1697.5, rolloutTime: 1267.9, waitTimeRatio: 0.7666 });
    expect(r.steps[1]!.metrics).toMatchObject({
      'perf/longest_sample_tokens_per_sec': 33.5,
      'perf/update_weights_density': 1.2e-5,
      'perf/big': Number.POSITIVE_INFINITY,
      meta: { engines: [1, 2], ok: true, note: null },
    });
  });

  it('reads the example hook lines and counts completed and aborted rollouts', () => {
    const r = parseSlimePerfLog(LOG);
    expect(r.steps[0]!.agent).toEqual({
      'pass@1': 0.4,
      'pass@k': 0.75,
      num_groups: 23,
      'turns/mean': 14.2,
      'sandbox_claim_sec/p50': 2.1,
    });
    expect(r.rollouts).toEqual({ completed: 2, aborted: 1 });
  });

  it('turns [agent] lines into results by step: phases in ms, an abort without a reward, bad rewards ignored', () => {
    const log = parseSlimePerfLog(
      [
        "perf 3: {'perf/rollout_time': 10.0}",
        '[agent] t1: reward=1.00 exit=Submitted turns=7 claim=0.50s agent=20.00s eval=4.00s exec=3.00s(n=5)',
        '[agent] t2 aborted: engine_error: connection reset',
        '[agent] t3: reward=1e999 turns=2',
        '[agent] t4: reward=1.2.3 turns=2',
        '[agent] t5: reward=nan turns=2',
      ].join('\n'),
    );
    expect(log.rollouts).toEqual({ completed: 1, aborted: 1 });
    expect(log.ignored).toBe(3);
    const [step] = agentResults(log);
    expect(step!.step).toBe(3);
    expect(step!.results[0]).toMatchObject({
      taskId: 't1',
      status: 'completed',
      reward: 1,
      turns: 7,
      timings: { claim: 500, agent: 20_000, eval: 4000, exec: 3000 },
    });
    expect(step!.results[1]).toMatchObject({
      status: 'aborted',
      error: { code: 'engine_error: connection reset' },
    });
    expect('reward' in step!.results[1]!).toBe(false);
  });

  it('counts cut-off and garbled perf lines as malformed and everything else as ignored', () => {
    const r = parseSlimePerfLog(LOG);
    expect(r.lines).toBe(12);
    expect(r.malformed).toBe(2);
    expect(r.malformedLines).toEqual([11, 12]);
    expect(r.ignored).toBe(2);
    expect(parseSlimePerfLog(LOG.split('\n'))).toMatchObject({ malformed: 2, steps: r.steps });
    expect(parseSlimePerfLog('')).toMatchObject({ lines: 0, steps: [] });
  });

  it('never throws on arbitrary input', () => {
    fc.assert(
      fc.property(
        fc.string({
          unit: fc.constantFrom('perf ', '1', ': ', '{', '}', "'", 'a', ',', '\n', '[agent] ', ':', 'nan'),
        }),
        (text) => {
          const r = parseSlimePerfLog(text);
          expect(r.lines).toBeGreaterThanOrEqual(r.malformed);
        },
      ),
    );
  });
});

describe('parsePythonLiteral', () => {
  it('reads repr() output', () => {
    expect(
      parsePythonLiteral(
        `{'a': 1, "b": [1.5, -2e3, (3, 4)], 'c': {'d': None, 'e': False}, 1: 'x\\'y', 'f': -inf, 'g': 1_000}`,
      ),
    ).toEqual({
      a: 1,
      b: [1.5, -2000, [3, 4]],
      c: { d: null, e: false },
      1: "x'y",
      f: Number.NEGATIVE_INFINITY,
      g: 1000,
    });
    expect(parsePythonLiteral('tensor(0.25)')).toBe(0.25);
    expect(() => parsePythonLiteral("{'a': 1")).toThrow(SyntaxError);
    expect(() => parsePythonLiteral('{} extra')).toThrow(SyntaxError);
  });
});
