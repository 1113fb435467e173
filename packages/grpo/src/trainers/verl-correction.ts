import { ConfigError, ValidationError } from '@vime/core';
import { allocate, type Dtype, type FloatArray, f32, rounder } from '../estimators/f32.js';
import { torchSum } from '../tokens/padded.js';

/**
 * verl's rollout correction (`verl/trainer/ppo/rollout_corr_helper.py`): truncated importance weights
 * and rejection masks between the training and the rollout policy, on a padded `[rows, width]` batch.
 */

export type RolloutRsOption =
  | 'token_k1'
  | 'token_k2'
  | 'token_k3'
  | 'seq_sum_k1'
  | 'seq_sum_k2'
  | 'seq_sum_k3'
  | 'seq_mean_k1'
  | 'seq_mean_k2'
  | 'seq_mean_k3'
  | 'seq_max_k2'
  | 'seq_max_k3';
/** Every verl rollout rejection-sampling option reproduced here. */
export const ROLLOUT_RS_OPTIONS = [
  'token_k1',
  'token_k2',
  'token_k3',
  'seq_sum_k1',
  'seq_sum_k2',
  'seq_sum_k3',
  'seq_mean_k1',
  'seq_mean_k2',
  'seq_mean_k3',
  'seq_max_k2',
  'seq_max_k3',
] as const satisfies readonly RolloutRsOption[];

/** verl's rollout correction settings (`algorithm.rollout_correction`). */
export interface RolloutCorrectionConfig {
  /** `bypass_mode`'s loss: PPO clip against the rollout policy, or REINFORCE with the IS weights. */
  lossType?: 'ppo_clip' | 'reinforce' | undefined;
  /** IS weight level (`null`: no weights). */
  rolloutIs?: 'token' | 'sequence' | null | undefined;
  /** Upper truncation of the IS weights (default 2). */
  rolloutIsThreshold?: number | null | undefined;
  rolloutIsBatchNormalize?: boolean | undefined;
  /** Rejection criteria, comma separated (`"token_k1,seq_mean_k3"`); all must pass. */
  rolloutRs?: string | null | undefined;
  /** One threshold, or one per option: `"lower_upper"` for `*_k1` (upper alone means 1/upper … upper), else an upper bound. */
  rolloutRsThreshold?: string | number | null | undefined;
}

export interface PaddedBatch {
  rows: number;
  width: number;
  dtype: Dtype;
}

/**
 * `compute_rollout_correction_and_rejection_mask`: IS weights (or null) and the rejection mask, from the
 * log-ratio of the training policy's log-probs to the rollout policy's.
 */
export function rolloutCorrection(
  batch: PaddedBatch,
  logRatio: FloatArray,
  mask: FloatArray,
  config: RolloutCorrectionConfig,
): { weights: FloatArray | null; mask: FloatArray } {
  if (!mask.some((m) => m !== 0)) {
    throw new ValidationError('lossMasks', 'must contain at least one valid token (verl rollout correction)');
  }
  const threshold = config.rolloutIsThreshold === undefined ? 2 : config.rolloutIsThreshold;
  const weights =
    config.rolloutIs != null && threshold !== null
      ? isWeights(batch, logRatio, mask, config.rolloutIs, threshold, config.rolloutIsBatchNormalize ?? false)
      : null;
  const out =
    config.rolloutRs != null
      ? rejectionMask(batch, logRatio, mask, config.rolloutRs, config.rolloutRsThreshold)
      : mask;
  return { weights, mask: out };
}

const SAFETY = 20;
const clampSafe = (v: number) => Math.min(SAFETY, Math.max(-SAFETY, v));

/** Row sums of `where(m, x, 0) * m` (verl `masked_sum(…, axis=-1)`). */
function maskedRowSums(batch: PaddedBatch, x: ArrayLike<number>, mask: ArrayLike<number>): Float64Array {
  const r = rounder(batch.dtype);
  const out = new Float64Array(batch.rows);
  const row = allocate(batch.dtype, batch.width);
  for (let i = 0; i < batch.rows; i++) {
    for (let t = 0; t < batch.width; t++) {
      const k = i * batch.width + t;
      row[t] = mask[k] ? r(x[k]! * mask[k]!) : 0;
    }
    out[i] = torchSum(row, batch.dtype);
  }
  return out;
}

function isWeights(
  batch: PaddedBatch,
  logRatio: FloatArray,
  mask: FloatArray,
  level: 'token' | 'sequence',
  threshold: number,
  normalize: boolean,
): FloatArray {
  if (level !== 'token' && level !== 'sequence') {
    throw new ConfigError(`rolloutIs: must be 'token' or 'sequence', found ${JSON.stringify(level)}`);
  }
  if (!(threshold > 0)) throw new ConfigError(`rolloutIsThreshold: must be positive, found ${threshold}`);
  const { dtype, width } = batch;
  const r = rounder(dtype);
  const sums = level === 'sequence' ? maskedRowSums(batch, logRatio, mask) : null;
  let w = logRatio.map((lr, k) => {
    const v = r(Math.exp(clampSafe(sums ? sums[Math.floor(k / width)]! : lr)));
    return Math.min(r(v * mask[k]!), r(threshold));
  });
  if (normalize) {
    let mean: number;
    if (level === 'token') {
      const kept = w.map((v, k) => (mask[k] ? r(v * mask[k]!) : 0));
      mean = r(torchSum(kept, dtype) / f32(torchSum(mask, dtype) + 1e-8));
    } else {
      const rowMask = maskedRowSums(batch, mask, mask);
      const seq = maskedRowSums(batch, w, mask).map((s, i) => r(s / f32(rowMask[i]! + 1e-8)));
      const valid = allocate(dtype, batch.rows).map((_, i) => (rowMask[i]! > 0 ? 1 : 0));
      const num = torchSum(
        seq.map((s, i) => r(s * valid[i]!)),
        dtype,
      );
      mean = r(num / Math.max(torchSum(valid, dtype), r(1e-8)));
    }
    if (mean > 1e-8) w = w.map((v) => r(v / mean));
  }
  return w;
}

interface Bounds {
  lower: number | null;
  upper: number;
}

/** verl `_parse_rollout_rs_thresholds`: one shared spec or one per option. */
function parseThresholds(options: RolloutRsOption[], spec: string | number | null | undefined): Bounds[] {
  if (spec === null || spec === undefined) {
    throw new ConfigError('rolloutRsThreshold: must be provided for rejection sampling (rolloutRs is set)');
  }
  let specs =
    typeof spec === 'number'
      ? [String(spec)]
      : spec
          .split(',')
          .map((p) => p.trim())
          .filter(Boolean);
  if (specs.length === 0)
    throw new ConfigError('rolloutRsThreshold: must contain at least one threshold value');
  if (specs.length !== 1 && specs.length !== options.length) {
    throw new ConfigError(
      `rolloutRsThreshold: expects one threshold shared by all options or exactly ${options.length} (one per rolloutRs option), found ${specs.length}`,
    );
  }
  if (specs.length === 1 && options.length > 1) specs = options.map(() => specs[0]!);
  return options.map((option, k) => {
    const s = specs[k]!;
    const number = (text: string) => {
      const v = Number(text);
      if (!Number.isFinite(v) || text.trim() === '') {
        throw new ConfigError(
          `rolloutRsThreshold: invalid number ${JSON.stringify(s)} for option '${option}'`,
        );
      }
      if (!(v > 0))
        throw new ConfigError(`rolloutRsThreshold: thresholds for '${option}' must be positive, found ${s}`);
      return v;
    };
    if (option.endsWith('k1')) {
      const [lo, hi] = s.includes('_')
        ? [s.slice(0, s.indexOf('_')), s.slice(s.indexOf('_') + 1)]
        : [null, s];
      const upper = number(hi!);
      return { lower: lo === null ? 1 / upper : number(lo), upper };
    }
    if (s.includes('_')) {
      throw new ConfigError(
        `rolloutRsThreshold: option '${option}' takes a single upper bound without '_', found ${JSON.stringify(s)}`,
      );
    }
    return { lower: null, upper: number(s) };
  });
}

/** `compute_rollout_rejection_mask`: the response mask with every token or sequence that fails a criterion zeroed. */
function rejectionMask(
  batch: PaddedBatch,
  logRatio: FloatArray,
  mask: FloatArray,
  spec: string,
  thresholdSpec: string | number | null | undefined,
): FloatArray {
  const options = [
    ...new Set(
      spec
        .split(',')
        .map((o) => o.trim())
        .filter(Boolean),
    ),
  ] as RolloutRsOption[];
  if (options.length === 0) throw new ConfigError('rolloutRs: must contain at least one option');
  for (const o of options) {
    if (!ROLLOUT_RS_OPTIONS.includes(o)) {
      throw new ConfigError(
        `rolloutRs: unknown option ${JSON.stringify(o)}; use one of ${ROLLOUT_RS_OPTIONS.join(', ')}`,
      );
    }
  }
  const bounds = parseThresholds(options, thresholdSpec);
  const { dtype, width, rows } = batch;
  const r = rounder(dtype);
  const safe = logRatio.map(clampSafe);
  const stats = {
    k1: safe.map((v) => -v),
    k2: safe.map((v) => r(0.5 * r(v * v))),
    k3: safe.map((v) => r(r(r(Math.exp(v)) - 1) - v)),
  };
  const counts = maskedRowSums(batch, mask, mask);
  const combined = allocate(dtype, mask.length).fill(1);
  options.forEach((option, k) => {
    const { lower, upper } = bounds[k]!;
    const kind = option.slice(-2) as 'k1' | 'k2' | 'k3';
    const stat = stats[kind];
    const lo = lower === null ? null : r(Math.log(lower));
    const hi = kind === 'k1' ? r(Math.log(upper)) : r(upper);
    const keep = (v: number) => (lo !== null ? v >= lo && v <= hi : v <= hi);
    if (option.startsWith('token')) {
      for (let j = 0; j < stat.length; j++) combined[j] = r(combined[j]! * (keep(stat[j]!) ? 1 : 0));
      return;
    }
    let perRow: Float64Array;
    if (option.startsWith('seq_sum')) perRow = maskedRowSums(batch, stat, mask);
    else if (option.startsWith('seq_mean'))
      perRow = maskedRowSums(batch, stat, mask).map((s, i) => r(s / f32(counts[i]! + 1e-8)));
    else {
      perRow = new Float64Array(rows);
      for (let i = 0; i < rows; i++) {
        let max = Number.NEGATIVE_INFINITY;
        for (let t = 0; t < width; t++) if (mask[i * width + t]) max = Math.max(max, stat[i * width + t]!);
        perRow[i] = max === Number.NEGATIVE_INFINITY ? 0 : max;
      }
    }
    for (let j = 0; j < combined.length; j++) {
      combined[j] = r(combined[j]! * (keep(perRow[Math.floor(j / width)]!) ? 1 : 0));
    }
  });
  return mask.map((m, j) => (m * combined[j]! !== 0 ? 1 : 0));
}
