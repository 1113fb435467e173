import { now, type Phase, type PhaseTimings } from '../rollout.js';

/** A rollout's phases: each one's total duration, the innermost one running, and the first that failed. */
export class PhaseRecorder {
  readonly timings: PhaseTimings = {};
  /** The first phase a failure escaped from (reported as the failure's phase). */
  failed: Phase | undefined;
  readonly #open: Phase[] = [];
  readonly #onPhase: (phase: Phase, durationMs: number) => void;

  constructor(onPhase: (phase: Phase, durationMs: number) => void) {
    this.#onPhase = onPhase;
  }

  /** The innermost phase still running. */
  get current(): Phase | undefined {
    return this.#open.at(-1);
  }

  async run<R>(phase: Phase, fn: () => R | Promise<R>): Promise<R> {
    this.#open.push(phase);
    const t0 = now();
    try {
      return await fn();
    } catch (error) {
      this.failed ??= phase;
      throw error;
    } finally {
      const durationMs = now() - t0;
      this.timings[phase] = (this.timings[phase] ?? 0) + durationMs;
      this.#open.pop();
      this.#onPhase(phase, durationMs);
    }
  }
}
