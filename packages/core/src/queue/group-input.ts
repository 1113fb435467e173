/** Checking what callers hand a `GroupQueue`: its options, samples, and the weight versions of their tokens. */
import { ConfigError, describeValue, ValidationError } from '../errors.js';
import { assertSampleInvariants, type Sample } from '../sample.js';
import type { Failure, SampleVersions } from './group-events.js';
import type { GroupQueueOptions, SiblingInput } from './group-types.js';

export type ResolvedOptions = {
  [K in Exclude<keyof GroupQueueOptions, 'groupsPerStep'>]-?: NonNullable<GroupQueueOptions[K]>;
} & { groupsPerStep: number | undefined };

export function resolveOptions(options: GroupQueueOptions): ResolvedOptions {
  const o: ResolvedOptions = {
    segmentBytes: options.segmentBytes ?? 8 << 20,
    sync: options.sync ?? true,
    deadlineMs: options.deadlineMs ?? 30 * 60_000,
    maxAttempts: options.maxAttempts ?? 3,
    maxLost: options.maxLost ?? 10,
    partials: options.partials ?? 'continue',
    maxStaleness: options.maxStaleness ?? Number.POSITIVE_INFINITY,
    onStale: options.onStale ?? 'drop',
    groupsPerStep: options.groupsPerStep,
    retainSteps: options.retainSteps ?? 0,
    autoGc: options.autoGc ?? true,
  };
  const fail = (name: string, want: string) => {
    throw new ConfigError(
      `GroupQueue.open options.${name}: expected ${want}, found ${describeValue((options as Record<string, unknown>)[name])}`,
    );
  };
  if (!Number.isInteger(o.segmentBytes) || o.segmentBytes < 4096) fail('segmentBytes', 'an integer ≥ 4096');
  if (!(o.deadlineMs > 0)) fail('deadlineMs', 'ms > 0');
  if (!Number.isInteger(o.maxAttempts) || o.maxAttempts < 1) fail('maxAttempts', 'an integer ≥ 1');
  if (!Number.isInteger(o.maxLost) || o.maxLost < 1) fail('maxLost', 'an integer ≥ 1');
  if (o.partials !== 'continue' && o.partials !== 'restart') fail('partials', "'continue' or 'restart'");
  if (!(o.maxStaleness >= 0)) fail('maxStaleness', 'a number of versions ≥ 0');
  if (o.onStale !== 'drop' && o.onStale !== 'wait') fail('onStale', "'drop' or 'wait'");
  if (o.onStale === 'wait' && Number.isFinite(o.maxStaleness)) {
    if (!Number.isInteger(o.groupsPerStep) || o.groupsPerStep! < 1) {
      fail('groupsPerStep', "an integer ≥ 1 (onStale: 'wait' admits work by steps)");
    }
  }
  if (!Number.isInteger(o.retainSteps) || o.retainSteps < 0) fail('retainSteps', 'an integer ≥ 0');
  return o;
}

/** The weight versions of each sample: given, or read from the samples. */
export function versionsOf(
  samples: ReadonlyArray<Sample>,
  given: ReadonlyArray<SampleVersions> | undefined,
  what: string,
): SampleVersions[] {
  const version = (v: unknown, path: string): number => {
    const n = typeof v === 'string' && /^\d{1,15}$/.test(v) ? Number(v) : v;
    if (!Number.isSafeInteger(n) || (n as number) < 0) {
      throw new ValidationError(
        path,
        `${what}: ${path} must be a weight version (an integer ≥ 0), found ${describeValue(v)}; engines report it when the trainer sets it (SGLang and the stand-in: POST /update_weight_version)`,
      );
    }
    return n as number;
  };
  // The capture proxy records `[start, end, version]` over the response (the version as the engine names
  // it); `[version, tokens]` pairs are accepted too. Either becomes a `[version, tokens]` span.
  const recordedSpan = (p: unknown, path: string): [number, number] => {
    const span: unknown[] = Array.isArray(p) ? p : [];
    const triple = span.length === 3;
    const counts = triple ? [span[0], span[1]] : [span[1]];
    const tokens = triple ? (span[1] as number) - (span[0] as number) : span[1];
    if (
      (span.length !== 2 && !triple) ||
      !counts.every((n) => Number.isSafeInteger(n) && (n as number) >= 0) ||
      (tokens as number) < 0
    ) {
      throw new ValidationError(
        path,
        `${what}: expected [start, end, version] (as the capture proxy records it) or [version, tokens], found ${describeValue(p)}`,
      );
    }
    const v = triple ? span[2] : span[0];
    const numbered = typeof v === 'string' && /^\d{1,15}$/.test(v) ? Number(v) : v;
    return [version(numbered, `${path}[${triple ? 2 : 0}]`), tokens as number];
  };
  if (given !== undefined) {
    if (!Array.isArray(given) || given.length !== samples.length) {
      throw new ValidationError(
        'versions',
        `${what}: expected one entry per sample (${samples.length}), found ${describeValue(given)}`,
      );
    }
    const list = (x: unknown, path: string): unknown[] => {
      if (Array.isArray(x)) return x;
      throw new ValidationError(path, `${what}: ${path} must be an array, found ${describeValue(x)}`);
    };
    return (given as ReadonlyArray<SampleVersions>).map((v, i) => {
      const versions = list(v?.versions, `versions[${i}].versions`).map((x, j) =>
        version(x, `versions[${i}].versions[${j}]`),
      );
      if (v?.spans === undefined) return { versions };
      const spans = list(v.spans, `versions[${i}].spans`).map((p, j): [number, number] => {
        const [x, t] = list(p, `versions[${i}].spans[${j}]`);
        if (!Number.isSafeInteger(t) || (t as number) < 0) {
          throw new ValidationError(
            `versions[${i}].spans[${j}][1]`,
            `${what}: expected a token count ≥ 0, found ${describeValue(t)}`,
          );
        }
        return [version(x, `versions[${i}].spans[${j}][0]`), t as number];
      });
      return { versions, spans };
    });
  }
  return samples.map((s, i) => {
    const raw = s.metadata?.weight_version_spans;
    const spans = Array.isArray(raw)
      ? raw.map((p, j) => recordedSpan(p, `samples[${i}].metadata.weight_version_spans[${j}]`))
      : undefined;
    const versions = s.weight_versions.map((v, j) => version(v, `samples[${i}].weight_versions[${j}]`));
    for (const [v] of spans ?? []) if (!versions.includes(v)) versions.push(v);
    if (versions.length === 0) {
      throw new ValidationError(
        `samples[${i}].weight_versions`,
        `${what}: samples[${i}] has no weight versions, so its staleness is unknown; pass versions explicitly or let the engine report them`,
      );
    }
    return spans ? { versions, spans } : { versions };
  });
}

export function checkSamples(samples: unknown, what: string): Sample[] {
  if (!Array.isArray(samples)) {
    throw new ValidationError(
      'samples',
      `GroupQueue.${what}: expected an array of Sample, found ${describeValue(samples)}`,
    );
  }
  for (const [i, s] of samples.entries()) assertSampleInvariants(s as Sample, `samples[${i}]`);
  return samples as Sample[];
}

export function checkCreate(n: unknown, key: unknown): void {
  if (!Number.isInteger(n) || (n as number) < 1 || (n as number) > 65_536) {
    throw new ConfigError(`GroupQueue.create n: expected an integer in 1..65536, found ${describeValue(n)}`);
  }
  if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > 4096)) {
    throw new ConfigError(
      `GroupQueue.create key: expected a non-empty string of at most 4096 characters, found ${describeValue(key)}`,
    );
  }
}

export function checkLease(slots: number, deadlineMs: number): void {
  if (!(slots >= 1))
    throw new ConfigError(`GroupQueue.lease slots: expected ≥ 1, found ${describeValue(slots)}`);
  if (!(deadlineMs > 0)) {
    throw new ConfigError(`GroupQueue.lease deadlineMs: expected ms > 0, found ${describeValue(deadlineMs)}`);
  }
}

/** A result's status (default `completed`) once its status and reward are checked. */
export function checkResult(result: SiblingInput): 'completed' | 'truncated' {
  const status = result?.status ?? 'completed';
  if (status !== 'completed' && status !== 'truncated') {
    throw new ConfigError(
      `GroupQueue.submit status: expected 'completed' or 'truncated', found ${describeValue(status)}; report failures with fail()`,
    );
  }
  if (typeof result.reward !== 'number' || !Number.isFinite(result.reward)) {
    throw new ValidationError(
      'reward',
      `GroupQueue.submit: expected a finite number, found ${describeValue(result.reward)}`,
    );
  }
  return status;
}

/** An infra error as the journal keeps it (strings only, whatever was thrown). */
export function failureOf(
  error: { code?: unknown; message?: unknown; phase?: unknown } | undefined,
): Failure {
  return {
    code: String(error?.code ?? 'error'),
    message: String(error?.message ?? ''),
    ...(error?.phase ? { phase: String(error.phase) } : {}),
  };
}
