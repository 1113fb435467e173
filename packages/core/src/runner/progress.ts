/**
 * A terminal progress bar for a rollout run, for CLIs and examples (libraries never print). It only
 * listens to the run's events; stopping it detaches it.
 */
import { Presets, SingleBar } from 'cli-progress';
import type { RolloutEvent } from '../rollout.js';
import type { TaskLike } from './options.js';
import type { RolloutRun } from './run.js';

/** Options of the progress bar. */
export interface RolloutProgressOptions {
  /** Where to draw. Default `process.stderr`. */
  stream?: NodeJS.WritableStream | undefined;
  /** Text before the bar. Default `rollouts`. */
  label?: string | undefined;
  /** Also print (one line per redraw) when the stream is not a terminal, e.g. in CI logs. Default false. */
  noTTYOutput?: boolean | undefined;
  /** Redraw interval off a terminal, ms. Default 2000. */
  notTTYSchedule?: number | undefined;
}

/** A progress bar attached to a run. */
export interface RolloutProgress {
  /** Draw the final state and detach from the run. Called automatically when the run ends. */
  stop(): void;
}

/**
 * Show `done/total`, rollouts in flight, outcomes by status and the mean reward of scored rollouts:
 * `rollouts [=====-----] 37/184 | in flight 64 | ok 30 trunc 2 fail 4 abort 1 | reward 0.412 | 01:12`.
 */
export function rolloutProgressBar<T extends TaskLike>(
  run: RolloutRun<T>,
  options: RolloutProgressOptions = {},
): RolloutProgress {
  const bar = new SingleBar(
    {
      stream: options.stream ?? process.stderr,
      format: `${options.label ?? 'rollouts'} [{bar}] {done}/{all} | in flight {inFlight} | ok {completed} trunc {truncated} fail {failed} abort {aborted} | reward {reward} | {duration_formatted}`,
      hideCursor: false,
      noTTYOutput: options.noTTYOutput ?? false,
      notTTYSchedule: options.notTTYSchedule ?? 2000,
      fps: 10,
    },
    Presets.shades_classic,
  );
  let rewardSum = 0;
  let scored = 0;
  const payload = () => ({
    done: run.stats.finished,
    all: total(),
    inFlight: run.stats.inFlight,
    ...run.stats.byStatus,
    reward: scored === 0 ? '-' : (rewardSum / scored).toFixed(3),
  });
  // Skipped rollouts (resume) do not count; unknown totals (async task sources) grow as rollouts start.
  const total = () => (run.total ?? run.stats.started + run.stats.skipped) - run.stats.skipped;
  // The bar's own total is at least 1: cli-progress draws 0 of 0 as a full bar.
  const draw = () => {
    bar.setTotal(Math.max(1, total()));
    bar.update(run.stats.finished, payload());
  };
  bar.start(Math.max(1, total()), 0, payload());

  const onEvent = (event: RolloutEvent) => {
    if (event.type === 'rollout:finish') {
      if (event.reward !== undefined) {
        rewardSum += event.reward;
        scored++;
      }
    } else if (event.type !== 'rollout:start') return;
    draw();
  };
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    run.off('event', onEvent);
    run.off('end', stop);
    draw();
    bar.stop();
  };
  run.on('event', onEvent);
  run.on('end', stop);
  return { stop };
}
