import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigSchema, runLoop } from '@vime/loop';
import { type Bench, fmt } from './harness.js';

/**
 * The coding-agent loop on its embedded defaults (bubblewrap sandboxes, offline tasks) with 1, 2 and 3
 * stand-in engines, each with the same fixed decode throughput, so the engines are the bottleneck as in
 * the reference example's engine-scaling runs. The reference is the 1-engine run of the same benchmark.
 */
const TOKENS_PER_SECOND = 300;

export default {
  name: 'coding-agent',
  description: `end-to-end step time of the coding-agent loop with 1/2/3 stand-in engines at ${TOKENS_PER_SECOND} tokens/s each`,
  async run() {
    const rows: Array<Array<string | number>> = [];
    const stepTimes: number[] = [];
    for (const engines of [1, 2, 3]) {
      const out = await mkdtemp(join(tmpdir(), 'vime-bench-ca-'));
      const config = ConfigSchema.parse({
        out,
        steps: 2,
        promptsPerStep: 4,
        samplesPerPrompt: 4,
        concurrency: 16,
        poolReplicas: 16,
        standInEngines: engines,
        standInTokensPerSecond: TOKENS_PER_SECOND,
        quiet: true,
      });
      const started = performance.now();
      const summary = await runLoop(config, { log: () => {} });
      const wall = (performance.now() - started) / 1000;
      const rollouts = summary.steps.reduce((n, s) => n + s.rollouts, 0);
      // Step 2 is the steady state (step 1 also warms the sandbox pool).
      const steady = summary.steps[1]!;
      stepTimes.push(steady.rolloutSeconds + steady.handoffSeconds);
      rows.push([
        engines,
        `${(steady.rolloutSeconds + steady.handoffSeconds).toFixed(1)} s`,
        fmt.ratio(stepTimes[0]! / stepTimes.at(-1)!),
        ((rollouts / wall) * 60).toFixed(1),
        summary.tokensPerSecond.toFixed(0),
        `${wall.toFixed(1)} s`,
      ]);
      await rm(out, { recursive: true, force: true });
    }
    const speedup3 = stepTimes[0]! / stepTimes[2]!;
    return [
      {
        title: 'engine scaling: 2 steps × 16 rollouts (4 prompts × 4 samples), concurrency 16',
        columns: [
          'engines',
          'step time (step 2)',
          'speed-up vs 1 engine',
          'rollouts/min',
          'output tokens/s',
          'run wall time',
        ],
        rows,
        checks: [
          {
            target: 'step time falls as engines are added (3 engines faster than 1)',
            measured: fmt.ratio(speedup3),
            ok: speedup3 > 1.2,
          },
        ],
        notes: [
          "Stand-in engines: a scripted policy behind SGLang's wire with a fixed decode throughput, not a model.",
        ],
      },
    ];
  },
} satisfies Bench;
