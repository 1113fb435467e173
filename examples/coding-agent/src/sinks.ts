/**
 * The run's metric sinks: `metrics.jsonl` (one line per rollout and per step) and TensorBoard event
 * files under `tensorboard/`. A sink that fails (a full disk) is reported once and then left alone:
 * metrics never cost a rollout.
 */
import { join } from 'node:path';
import { fanOut, jsonlSink, type MetricSink, type RunMetadata, tensorboardSink } from '@vime/metrics';

export async function openRunSinks(
  out: string,
  run: RunMetadata,
  log: (line: string) => void,
): Promise<MetricSink> {
  const sink = fanOut([
    await jsonlSink(join(out, 'metrics.jsonl'), run),
    await tensorboardSink(join(out, 'tensorboard'), run),
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
