import { ConfigError, describeValue, ValidationError } from '@vime/core';
import { allocate, type Dtype, type FloatArray, f32, rounder } from '../estimators/f32.js';
import { type PaddedLayout, pad, paddedLayout, padMask, rowSums, torchSum, unpad } from '../tokens/padded.js';
import type { LossMasks } from '../tokens/tokens.js';
import { type AggregationMode, aggregateLoss } from './loss.js';
import { type RolloutCorrectionConfig, rolloutCorrection } from './verl-correction.js';

/**
 * volcengine/verl's KL estimator `kl_penalty` and every registered policy loss of `core_algos.py`
 * (`vanilla`, `gspo`, `sapo`, `gpg`, `clip_cov`, `kl_cov`, `geo_mean`, `cispo`, `bypass_mode`), with the
 * global-batch denominators verl passes to `agg_loss`.
 */

export type VerlKlType = 'kl' | 'k1' | 'abs' | 'mse' | 'k2' | 'low_var_kl' | 'k3';
/** Every verl KL penalty type reproduced here. */
export const VERL_KL_TYPES = [
  'kl',
  'k1',
  'abs',
  'mse',
  'k2',
  'low_var_kl',
  'k3',
] as const satisfies readonly VerlKlType[];

/** A per-token KL estimate and its mean. */
export interface KlPenalty {
  /** Per-token KL estimate. */
  kl: FloatArray;
  /** Its gradient with respect to `logProbs` (what the KL loss backpropagates). */
  grad: FloatArray;
}

/**
 * verl `kl_penalty(logprob, ref_logprob, type)` with `lr = logp − ref`: `kl`/`k1` `lr`, `abs` `|lr|`,
 * `mse`/`k2` `lr²/2`, `low_var_kl`/`k3` `exp(−lr) + lr − 1` on the log-ratio clamped to ±20, result
 * clamped to ±10. The straight-through `+` variants (`k3+` …) raise NotImplementedError in verl at
 * this version (`kl_penalty_forward` receives the suffixed name), so they are refused here too; `full`
 * needs whole-vocabulary logits and is not implemented by verl either.
 */
export function klPenalty(
  logProbs: ArrayLike<number>,
  refLogProbs: ArrayLike<number>,
  options: { type: VerlKlType; dtype?: Dtype | undefined },
): KlPenalty {
  const { type, dtype = 'float32' } = options;
  if (typeof type === 'string' && (type.endsWith('+') || (type as string) === 'full')) {
    throw new ConfigError(
      `type: verl's kl_penalty raises NotImplementedError for ${JSON.stringify(type)} at this version (its forward pass is called with the name as given); use one of ${VERL_KL_TYPES.join(', ')}`,
    );
  }
  if (!VERL_KL_TYPES.includes(type)) {
    throw new ConfigError(
      `type: unknown KL estimator ${JSON.stringify(type)}; use one of ${VERL_KL_TYPES.join(', ')}`,
    );
  }
  if (refLogProbs.length !== logProbs.length) {
    throw new ValidationError(
      'refLogProbs',
      `has ${refLogProbs.length} values but logProbs has ${logProbs.length}`,
    );
  }
  const r = rounder(dtype);
  const kl = allocate(dtype, logProbs.length);
  const grad = allocate(dtype, logProbs.length);
  for (let i = 0; i < logProbs.length; i++) {
    const lr = r(r(logProbs[i]!) - r(refLogProbs[i]!));
    if (type === 'kl' || type === 'k1') {
      kl[i] = lr;
      grad[i] = 1;
    } else if (type === 'abs') {
      kl[i] = Math.abs(lr);
      grad[i] = Math.sign(lr);
    } else if (type === 'mse' || type === 'k2') {
      kl[i] = r(0.5 * r(lr * lr));
      grad[i] = lr;
    } else {
      const d = r(r(refLogProbs[i]!) - r(logProbs[i]!));
      const clamped = Math.min(20, Math.max(-20, d));
      const ratio = r(Math.exp(clamped));
      const value = r(r(ratio - clamped) - 1);
      kl[i] = Math.min(10, Math.max(-10, value));
      grad[i] = value >= -10 && value <= 10 && d >= -20 && d <= 20 ? r(1 - ratio) : 0;
    }
  }
  return { kl, grad };
}

/** A verl `policy_loss.loss_mode`. */
export type VerlLossMode =
  | 'vanilla'
  | 'gspo'
  | 'sapo'
  | 'gpg'
  | 'clip_cov'
  | 'kl_cov'
  | 'geo_mean'
  | 'cispo'
  | 'bypass_mode';
/** Every verl `loss_mode` reproduced here. */
export const VERL_LOSS_MODES = [
  'vanilla',
  'gspo',
  'sapo',
  'gpg',
  'clip_cov',
  'kl_cov',
  'geo_mean',
  'cispo',
  'bypass_mode',
] as const satisfies readonly VerlLossMode[];

/** The actor config fields the policy losses read (verl `ActorConfig` defaults). */
export interface VerlActorConfig {
  clipRatio?: number | undefined;
  clipRatioLow?: number | null | undefined;
  clipRatioHigh?: number | null | undefined;
  /** Dual clip for A < 0 (default 3, always on in `vanilla`). */
  clipRatioC?: number | undefined;
  tauPos?: number | undefined;
  tauNeg?: number | undefined;
  clipCovRatio?: number | undefined;
  clipCovLb?: number | undefined;
  clipCovUb?: number | undefined;
  klCovRatio?: number | undefined;
  ppoKlCoef?: number | undefined;
  rolloutCorrection?: RolloutCorrectionConfig | undefined;
}

/** `config.global_batch_info`: the denominators of the whole (data-parallel) batch. */
export interface VerlGlobalBatchInfo {
  dpSize?: number | undefined;
  batchNumTokens?: number | null | undefined;
  globalBatchSize?: number | null | undefined;
  lossScaleFactor?: number | null | undefined;
}

/** What verl's policy loss is computed from. */
export interface VerlPolicyLossInput {
  oldLogProbs: ArrayLike<number>;
  logProbs: ArrayLike<number>;
  /** Per-token advantages (flat). */
  advantages: ArrayLike<number>;
  responseLengths: ArrayLike<number>;
  lossMasks: LossMasks;
  /** Rollout-correction weights that multiply the per-token loss. */
  rolloutIsWeights?: ArrayLike<number> | undefined;
  /** `clip_cov`: the permutation `torch.randperm(#candidates)` drew (needed when there are more candidates than slots). */
  randperm?: ArrayLike<number> | undefined;
  paddedLength?: number | undefined;
  dtype?: Dtype | undefined;
}

/** Options of verl's policy loss. */
export interface VerlPolicyLossOptions {
  lossMode?: VerlLossMode | undefined;
  lossAggMode?: Exclude<AggregationMode, 'rollout-mean'> | undefined;
  config?: VerlActorConfig | undefined;
  globalBatchInfo?: VerlGlobalBatchInfo | undefined;
}

/** verl's policy loss and the metrics it logs. */
export interface VerlPolicyLoss {
  loss: number;
  /** `actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower` where the loss reports them. */
  metrics: Record<string, number>;
  /** The per-token loss before aggregation (flat; sequence-level for `geo_mean`: one value per token of its sequence). */
  losses: FloatArray;
}

interface Batch {
  layout: PaddedLayout;
  r: (x: number) => number;
  old: FloatArray;
  logp: FloatArray;
  adv: FloatArray;
  mask: FloatArray;
  isw: FloatArray | null;
}

/** A policy loss of verl's `POLICY_LOSS_REGISTRY`, on verl's padded batch. */
export function verlPolicyLoss(
  input: VerlPolicyLossInput,
  options: VerlPolicyLossOptions = {},
): VerlPolicyLoss {
  const { lossMode = 'vanilla', lossAggMode = 'token-mean', config = {}, globalBatchInfo = {} } = options;
  if (!VERL_LOSS_MODES.includes(lossMode)) {
    throw new ConfigError(
      `lossMode: unknown ${JSON.stringify(lossMode)}; use one of ${VERL_LOSS_MODES.join(', ')}`,
    );
  }
  const dtype = input.dtype ?? 'float32';
  const layout = paddedLayout(input.responseLengths, input.lossMasks, {
    paddedLength: input.paddedLength,
    dtype,
  });
  const b: Batch = {
    layout,
    r: rounder(dtype),
    old: pad(layout, input.oldLogProbs, 'oldLogProbs'),
    logp: pad(layout, input.logProbs, 'logProbs'),
    adv: pad(layout, input.advantages, 'advantages'),
    mask: padMask(layout),
    isw: input.rolloutIsWeights ? pad(layout, input.rolloutIsWeights, 'rolloutIsWeights') : null,
  };
  const low = config.clipRatioLow ?? config.clipRatio ?? 0.2;
  const high = config.clipRatioHigh ?? config.clipRatio ?? 0.2;
  const agg = (losses: FloatArray, mode = lossAggMode, mask = b.mask) => {
    const weighted = b.isw ? losses.map((v, k) => b.r(v * b.isw![k]!)) : losses;
    return {
      value: aggregateLoss(
        unpad(layout, weighted),
        input.responseLengths,
        Uint8Array.from(unpad(layout, mask), (m) => (m ? 1 : 0)),
        {
          mode,
          dtype,
          paddedLength: layout.width,
          ...globalBatchInfo,
        },
      ),
      weighted,
    };
  };
  const finish = (
    losses: FloatArray,
    mode?: Exclude<AggregationMode, 'rollout-mean'>,
    metrics = {},
    mask?: FloatArray,
  ) => {
    const { value, weighted } = agg(losses, mode, mask);
    return { loss: value, metrics, losses: unpad(layout, weighted) };
  };
  switch (lossMode) {
    case 'vanilla':
      return vanilla(b, low, high, config.clipRatioC ?? 3, (l, m) => finish(l, undefined, m));
    case 'gspo':
      return gspo(b, low, high, (l, m) => finish(l, 'seq-mean-token-mean', m));
    case 'sapo':
      return sapo(b, config.tauPos ?? 1, config.tauNeg ?? 1.05, (l, m) =>
        finish(l, 'seq-mean-token-mean', m),
      );
    case 'gpg':
      return finish(b.logp.map((lp, k) => b.r(-lp * b.adv[k]!)));
    case 'clip_cov':
      return clipCov(b, low, high, config, input.randperm, (l, m) => finish(l, undefined, m));
    case 'kl_cov':
      return klCov(b, config, (l, m) => finish(l, undefined, m));
    case 'geo_mean':
      return geoMean(b, low, high);
    case 'cispo': {
      const { ratio, nak } = ratioOf(b, true);
      const clipped = ratio.map((x) => Math.min(b.r(1 + high), Math.max(b.r(1 - low), x)));
      const losses = clipped.map((c, k) => b.r(b.r(-c * b.adv[k]!) * b.logp[k]!));
      const metrics = {
        'actor/pg_clipfrac': flagMean(
          b,
          ratio.map((x, k) => (x !== clipped[k] ? 1 : 0)),
        ),
        'actor/ppo_kl': maskedMean(
          b,
          nak.map((v) => -v),
        ),
        'actor/pg_clipfrac_lower': 0,
      };
      return finish(losses, undefined, metrics);
    }
    default:
      // bypass_mode computes its own IS weights; any given ones are ignored, as in verl.
      b.isw = null;
      return bypass(b, low, high, config, finish);
  }
}

/**
 * verl `masked_mean` over the whole batch: `Σ where(m, x, 0)·m / (Σm + 1e-8)`, the denominator a float32
 * tensor (integer mask). `dtype` is that of `x`: the clip fractions are `.float()` flags, float32 always.
 */
function maskedMean(
  b: Batch,
  x: ArrayLike<number>,
  mask: ArrayLike<number> = b.mask,
  dtype = b.layout.dtype,
): number {
  const r = rounder(dtype);
  const kept = allocate(dtype, x.length).map((_, k) => (mask[k] ? r(x[k]! * mask[k]!) : 0));
  return r(torchSum(kept, dtype) / f32(torchSum(mask, 'float32') + 1e-8));
}

/** A masked mean of 0/1 flags (`….float()`): float32. */
const flagMean = (b: Batch, flags: ArrayLike<number>, mask: ArrayLike<number> = b.mask) =>
  maskedMean(b, flags, mask, 'float32');

function ratioOf(b: Batch, clamp: boolean) {
  const nak = b.logp.map((lp, k) => {
    const d = b.r(lp - b.old[k]!);
    return clamp ? Math.min(20, Math.max(-20, d)) : d;
  });
  return { nak, ratio: nak.map((v) => b.r(Math.exp(v))) };
}

type Finish = (losses: FloatArray, metrics: Record<string, number>) => VerlPolicyLoss;

function vanilla(
  b: Batch,
  low: number,
  high: number,
  c: number,
  finish: Finish,
  mask = b.mask,
): VerlPolicyLoss {
  if (!(c > 1)) throw new ConfigError(`clipRatioC: the dual-clip bound must be greater than 1, found ${c}`);
  const { r } = b;
  const { nak, ratio } = ratioOf(b, true);
  const lo = r(1 - low);
  const hi = r(1 + high);
  const n = ratio.length;
  const losses = allocate(b.layout.dtype, n);
  const clipped = allocate(b.layout.dtype, n);
  const lower = allocate(b.layout.dtype, n);
  for (let k = 0; k < n; k++) {
    const a = b.adv[k]!;
    const l1 = r(-a * ratio[k]!);
    const l2 = r(-a * Math.min(hi, Math.max(lo, ratio[k]!)));
    const c1 = Math.max(l1, l2);
    const l3 = r(-a * r(c));
    clipped[k] = l2 > l1 ? 1 : 0;
    lower[k] = c1 > l3 && a < 0 ? 1 : 0;
    losses[k] = a < 0 ? Math.min(l3, c1) : c1;
  }
  return finish(losses, {
    'actor/pg_clipfrac': flagMean(b, clipped, mask),
    'actor/ppo_kl': maskedMean(
      b,
      nak.map((v) => -v),
      mask,
    ),
    'actor/pg_clipfrac_lower': flagMean(b, lower, mask),
  });
}

function gspo(b: Batch, low: number, high: number, finish: Finish): VerlPolicyLoss {
  const { r, layout } = b;
  const nak = b.logp.map((lp, k) => r(lp - b.old[k]!));
  const counts = rowSums(layout, b.mask).map((c) => Math.max(c, 1));
  const seq = rowSums(
    layout,
    nak.map((v, k) => r(v * b.mask[k]!)),
  ).map((s, i) => r(s / counts[i]!));
  const sir = nak.map((_, k) => r(Math.exp(Math.min(10, seq[Math.floor(k / layout.width)]!))));
  const l1 = sir.map((s, k) => r(-b.adv[k]! * s));
  const l2 = sir.map((s, k) => r(-b.adv[k]! * Math.min(r(1 + high), Math.max(r(1 - low), s))));
  return finish(
    l1.map((v, k) => Math.max(v, l2[k]!)),
    {
      'actor/pg_clipfrac': flagMean(
        b,
        l2.map((v, k) => (v > l1[k]! ? 1 : 0)),
      ),
      'actor/ppo_kl': maskedMean(
        b,
        nak.map((v) => -v),
      ),
      'actor/pg_clipfrac_lower': 0,
    },
  );
}

function sapo(b: Batch, tauPos: number, tauNeg: number, finish: Finish): VerlPolicyLoss {
  const { r } = b;
  const { nak, ratio } = ratioOf(b, true);
  const losses = ratio.map((x, k) => {
    const a = b.adv[k]!;
    const tau = r(a > 0 ? tauPos : tauNeg);
    // torch's sigmoid: (exp(−z) + 1).reciprocal(), each op rounded.
    const z = r(tau * r(x - 1));
    const gate = r(r(1 / r(1 + r(Math.exp(-z)))) * r(4 / tau));
    return r(-gate * a);
  });
  return finish(losses, {
    'actor/pg_clipfrac': 0,
    'actor/ppo_kl': maskedMean(
      b,
      nak.map((v) => -v),
    ),
    'actor/pg_clipfrac_lower': 0,
  });
}

function clipCov(
  b: Batch,
  low: number,
  high: number,
  config: VerlActorConfig,
  randperm: ArrayLike<number> | undefined,
  finish: Finish,
): VerlPolicyLoss {
  const { r } = b;
  const ratioCap = config.clipCovRatio ?? 0.0002;
  if (!(ratioCap > 0)) throw new ConfigError(`clipCovRatio: must be larger than 0, found ${ratioCap}`);
  const { nak, ratio } = ratioOf(b, false);
  const l1 = ratio.map((x, k) => r(-b.adv[k]! * x));
  const l2 = ratio.map((x, k) => r(-b.adv[k]! * Math.min(r(1 + high), Math.max(r(1 - low), x))));
  const meanA = maskedMean(b, b.adv);
  const meanLp = maskedMean(b, b.logp);
  const ub = r(config.clipCovUb ?? 5);
  const lb = r(config.clipCovLb ?? 1);
  const candidates: number[] = [];
  for (let k = 0; k < ratio.length; k++) {
    if (!b.mask[k] || l2[k]! > l1[k]!) continue;
    const cov = r(r(b.adv[k]! - meanA) * r(b.logp[k]! - meanLp));
    if (cov < ub && cov > lb) candidates.push(k);
  }
  const slots = Math.max(Math.trunc(ratioCap * torchSum(b.mask, b.layout.dtype)), 1);
  let chosen = candidates;
  if (candidates.length > slots) {
    if (!randperm || randperm.length !== candidates.length) {
      throw new ValidationError(
        'randperm',
        `clip_cov has ${candidates.length} candidate tokens for ${slots} slots and picks them with torch.randperm(${candidates.length}); pass that permutation (found ${describeValue(randperm)})`,
      );
    }
    chosen = Array.from({ length: slots }, (_, j) => candidates[randperm[j]!]!);
  }
  const corr = allocate(b.layout.dtype, ratio.length).fill(1);
  for (const k of chosen) corr[k] = 0;
  return finish(
    l1.map((v, k) => r(Math.max(v, l2[k]!) * corr[k]!)),
    {
      'actor/pg_clipfrac': flagMean(
        b,
        corr.map((c) => (c === 0 ? 1 : 0)),
      ),
      'actor/ppo_kl': maskedMean(
        b,
        nak.map((v) => -v),
      ),
    },
  );
}

function klCov(b: Batch, config: VerlActorConfig, finish: Finish): VerlPolicyLoss {
  const { r } = b;
  const share = config.klCovRatio ?? 0.0002;
  if (!(share > 0)) throw new ConfigError(`klCovRatio: must be larger than 0, found ${share}`);
  const coef = config.ppoKlCoef ?? 0.1;
  const { nak, ratio } = ratioOf(b, false);
  const losses = ratio.map((x, k) => r(-b.adv[k]! * x));
  const valid: number[] = [];
  for (let k = 0; k < ratio.length; k++) if (b.mask[k]! > 0) valid.push(k);
  if (valid.length > 0) {
    const dt = b.layout.dtype;
    const meanOf = (x: FloatArray) =>
      r(torchSum(Float64Array.from(valid, (k) => x[k]!).map(r), dt) / valid.length);
    const mA = meanOf(b.adv);
    const mL = meanOf(b.logp);
    const cov = valid.map((k) => r(r(b.adv[k]! - mA) * r(b.logp[k]! - mL)));
    const top = Math.max(1, Math.trunc(valid.length * share));
    // torch.topk(largest=True); equal covariances are taken in index order.
    const order = cov.map((_, j) => j).sort((x, y) => cov[y]! - cov[x]! || x - y);
    for (const j of order.slice(0, top)) {
      const k = valid[j]!;
      losses[k] = r(r(-b.adv[k]! * ratio[k]!) + r(r(coef) * Math.abs(nak[k]!)));
    }
  }
  return finish(losses, {
    'actor/ppo_kl': maskedMean(
      b,
      nak.map((v) => Math.abs(v)),
    ),
  });
}

function geoMean(b: Batch, low: number, high: number): VerlPolicyLoss {
  const { r, layout } = b;
  const nak = b.logp.map((lp, k) => r(lp - b.old[k]!));
  const clamped = nak.map((v) => Math.min(r(high), Math.max(r(-low), v)));
  const minimum = nak.map((v, k) => {
    const s = Math.sign(b.adv[k]!);
    return r(s * Math.min(r(s * v), r(s * clamped[k]!)));
  });
  const counts = rowSums(layout, b.mask).map((c) => f32(c + 1e-8)); // integer mask: a float32 tensor
  const ratio = rowSums(
    layout,
    minimum.map((v, k) => r(v * b.mask[k]!)),
  ).map((s, i) => r(Math.exp(r(s / counts[i]!))));
  const advantage = rowSums(
    layout,
    b.adv.map((a, k) => r(a * b.mask[k]!)),
  ).map((s, i) => r(s / counts[i]!));
  let perSeq = allocate(layout.dtype, layout.rows).map((_, i) => r(-advantage[i]! * ratio[i]!));
  if (b.isw) {
    const logs = rowSums(
      layout,
      b.isw.map((w, k) => r(r(Math.log(r(w + r(1e-10)))) * b.mask[k]!)),
    );
    perSeq = perSeq.map((p, i) => r(p * r(Math.exp(r(logs[i]! / counts[i]!)))));
  }
  const hit = nak.map((v, k) => (v !== clamped[k] ? 1 : 0));
  const losses = unpad(
    layout,
    allocate(layout.dtype, layout.rows * layout.width).map((_, k) => perSeq[Math.floor(k / layout.width)]!),
  );
  return {
    loss: r(torchSum(perSeq, layout.dtype) / layout.rows),
    losses,
    metrics: {
      'actor/pg_clipfrac': flagMean(
        b,
        hit.map((h, k) => (h && b.adv[k]! > 0 ? 1 : 0)),
      ),
      'actor/ppo_kl': maskedMean(
        b,
        nak.map((v) => -v),
      ),
      'actor/pg_clipfrac_lower': flagMean(
        b,
        hit.map((h, k) => (h && b.adv[k]! < 0 ? 1 : 0)),
      ),
    },
  };
}

/** `bypass_mode`: old log-probs are the rollout's; IS weights and rejection masks, then REINFORCE or PPO clip. */
function bypass(
  b: Batch,
  low: number,
  high: number,
  config: VerlActorConfig,
  finish: (
    losses: FloatArray,
    mode?: Exclude<AggregationMode, 'rollout-mean'>,
    metrics?: Record<string, number>,
    mask?: FloatArray,
  ) => VerlPolicyLoss,
): VerlPolicyLoss {
  const rc = config.rolloutCorrection;
  if (!rc) {
    throw new ConfigError(
      "rolloutCorrection: bypass_mode needs config.rolloutCorrection (verl's policy_loss.rollout_correction)",
    );
  }
  const lossType = rc.lossType ?? 'ppo_clip';
  if (lossType !== 'ppo_clip' && lossType !== 'reinforce') {
    throw new ConfigError(
      `rolloutCorrection.lossType: must be 'reinforce' or 'ppo_clip', found ${JSON.stringify(lossType)}`,
    );
  }
  const { r, layout } = b;
  const logRatio = b.logp.map((lp, k) => r(lp - b.old[k]!));
  const corrected = rolloutCorrection(layout, logRatio, b.mask, rc);
  if (lossType === 'reinforce') {
    const w = corrected.weights;
    const losses = b.adv.map((a, k) => (w ? r(r(-a * b.logp[k]!) * w[k]!) : r(-a * b.logp[k]!)));
    const out = finish(losses, undefined, {}, corrected.mask);
    return {
      ...out,
      metrics: {
        'actor/ppo_kl': maskedMean(
          b,
          logRatio.map((v) => -v),
          corrected.mask,
        ),
      },
    };
  }
  // PPO clip against the rollout policy, without IS weights (the ratio already is one).
  return vanilla(
    b,
    low,
    high,
    config.clipRatioC ?? 3,
    (losses, metrics) => finish(losses, undefined, metrics, corrected.mask),
    corrected.mask,
  );
}
