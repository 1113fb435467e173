/**
 * The router's weight-update log: which weight version each engine served, and from when. Entries come
 * from updates the router applied (`updateWeights`: between the pause and the resume), updates a caller
 * applied itself and noted (`noteWeightUpdate`: a trainer that loaded the weights into its engines), and
 * versions an engine reported with its answers (SGLang's `meta_info.weight_version`). An engine whose
 * answers carry no version (vLLM has no such field) gets its tokens' versions from this log: each
 * streamed chunk takes the version in force for its engine when the proxy received it.
 */

/** How a version came into the log. */
export type WeightLogSource = 'update' | 'noted' | 'reported';

/** One change of the version an engine serves. */
export interface WeightLogEntry {
  /** The engine's URL. */
  url: string;
  version: string;
  source: WeightLogSource;
  /** Order of the entry over the whole log (0 first). */
  seq: number;
  /** When it took effect, as `Date.now()` in this process. */
  at: number;
}

/** The versions every engine served, in the order they took effect. */
export class WeightUpdateLog {
  readonly #entries: WeightLogEntry[] = [];
  readonly #current = new Map<string, string>();
  readonly #seen = new Map<string, Set<string>>();

  /**
   * `version` is in force for the engine at `url` from now on. Nothing is logged when it already is
   * (an engine reports its version with every answer). Returns the entry, or undefined when unchanged.
   */
  record(url: string, version: string, source: WeightLogSource): WeightLogEntry | undefined {
    if (this.#current.get(url) === version) return undefined;
    const entry = { url, version, source, seq: this.#entries.length, at: Date.now() };
    this.#entries.push(entry);
    this.#current.set(url, version);
    const seen = this.#seen.get(url) ?? new Set<string>();
    seen.add(version);
    this.#seen.set(url, seen);
    return entry;
  }

  /** The version in force for an engine now (undefined: none was ever logged for it). */
  current(url: string): string | undefined {
    return this.#current.get(url);
  }

  /** Whether `version` was ever in force for the engine at `url`. */
  logged(url: string, version: string): boolean {
    return this.#seen.get(url)?.has(version) ?? false;
  }

  /** Every entry, oldest first. */
  entries(): readonly WeightLogEntry[] {
    return this.#entries;
  }
}
