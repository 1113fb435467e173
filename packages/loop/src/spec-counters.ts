/**
 * Speculative decoding per step from the engines' `/metrics`, for engines whose answers carry no
 * per-request count (vLLM: its `vllm:spec_decode_*` counters). Every hand-off reads each engine's
 * counters; a step's figures are their increase since the previous hand-off (the run's start for the
 * first). With the next step's rollouts already running (async), that increase is the engines' work
 * between two hand-offs, not exactly the step's rows: the report names the source of every step's figures.
 */

import type { PromParse } from '@vime/metrics';
import { type StepSpecDecode, sumSpecDecode, vllmSpecDecodeDelta } from '@vime/metrics';
import { scrapePrometheus } from '@vime/metrics/scrape';

/** How one engine's `/metrics` is read (default: `scrapePrometheus` with a 5 s timeout). */
export type ReadMetrics = (url: string) => Promise<Pick<PromParse, 'samples'>>;

/** An engine whose last read failed: its next increase is unknown (counting from 0 would overstate it). */
const UNKNOWN = Symbol('unknown');

export class SpecCounters {
  readonly #urls: readonly string[];
  readonly #read: ReadMetrics;
  readonly #last = new Map<string, Pick<PromParse, 'samples'> | typeof UNKNOWN>();
  #pending: Promise<void>;

  /** `urls`: the engines' base URLs; reading starts now (the first step's baseline). */
  constructor(
    urls: readonly string[],
    read: ReadMetrics = (url) => scrapePrometheus(url, { timeoutMs: 5_000 }),
  ) {
    this.#urls = urls;
    this.#read = read;
    this.#pending = this.#readAll().then(() => {});
  }

  /** The step's figures: every engine's counter increase since the last call, summed; undefined with none. */
  async step(): Promise<StepSpecDecode | undefined> {
    await this.#pending;
    const deltas = await this.#readAll();
    this.#pending = Promise.resolve();
    return sumSpecDecode(deltas);
  }

  async #readAll(): Promise<Array<StepSpecDecode | undefined>> {
    return Promise.all(
      this.#urls.map(async (url) => {
        const before = this.#last.get(url);
        let after: Pick<PromParse, 'samples'>;
        try {
          after = await this.#read(`${url}/metrics`);
        } catch {
          this.#last.set(url, UNKNOWN);
          return undefined;
        }
        this.#last.set(url, after);
        return before === UNKNOWN ? undefined : vllmSpecDecodeDelta(before, after);
      }),
    );
  }
}
