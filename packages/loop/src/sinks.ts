/**
 * The run's metric sinks: `metrics.jsonl` (one line per rollout and per step), TensorBoard event
 * files under `tensorboard/` (unless turned off), and with `--wandb-project` a Weights & Biases offline run under `wandb/`. A sink that fails (a full disk) is reported once and then left alone:
 * metrics never cost a rollout.
 */
import { join } from 'node:path';
import {
  fanOut,
  jsonlSink,
  type MetricSink,
  type RunMetadata,
  tensorboardSink,
  wandbOfflineSink,
} from '@vime/metrics/sinks';

/** The run's metric sinks: JSON lines, TensorBoard and, when asked, a W&B offline run. */
export async function openRunSinks(
  out: string,
  run: RunMetadata,
  log: (line: string) => void,
  options: { wandbProject?: string | undefined; tensorboard?: boolean | undefined } = {},
): Promise<MetricSink> {
  const sink = fanOut([
    // A resumed run (or a restarted server) keeps what its earlier starts wrote.
    await jsonlSink(join(out, 'metrics.jsonl'), run, { append: true }),
    ...(options.tensorboard === false ? [] : [await tensorboardSink(join(out, 'tensorboard'), run)]),
    ...(options.wandbProject
      ? [await wandbOfflineSink(join(out, 'wandb'), run, { project: options.wandbProject })]
      : []),
  ]);
  let reported = false;
  const guard = (p: Promise<void>) =>
    p.catch((error: unknown) => {
      if (reported) return;
      reported = true;
      log(
        `metrics: a sink failed (${(error as Error).message}); the run goes on, its report is still written`,
      );
    });
  return {
    rollout: (r) => guard(sink.rollout(r)),
    step: (s) => guard(sink.step(s)),
    close: (summary) => guard(sink.close(summary)),
  };
}
