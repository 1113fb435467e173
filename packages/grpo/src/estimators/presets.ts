import { ConfigError } from '@vime/core';
import type { Dtype } from './f32.js';
import { MOMENTS_KINDS, type MomentsKind } from './moments.js';

/**
 * The trainers whose GRPO conventions the SDK reproduces. `drGrpo` is slime with std normalization
 * off; `verl` is verl's loop estimator (`adv_estimator=grpo`), `verlVectorized` its `grpo_vectorized`.
 */
export type Preset = 'slime' | 'verl' | 'verlVectorized' | 'trl' | 'openrlhf' | 'drGrpo';
/** Every trainer preset. */
export const PRESETS = [
  'slime',
  'verl',
  'verlVectorized',
  'trl',
  'openrlhf',
  'drGrpo',
] as const satisfies readonly Preset[];

/** What rewards are normalized over: the group, the batch, or nothing. */
export type Scale = 'group' | 'batch' | 'none';
/** Whether the std is unbiased (Bessel's correction) or biased. */
export type StdKind = 'unbiased' | 'biased';
/**
 * What a group of one sample gets: 0 (slime, TRL), its raw reward divided by `float32(1 + ε)` (verl:
 * mean 0 and std 1 as float32 tensors, whatever the scores' dtype), or an error (OpenRLHF asserts n > 1).
 */
export type SingletonPolicy = 'zero' | 'raw' | 'error';
/**
 * How a trainer spreads a sequence advantage over the response tokens: on every token (slime, TRL),
 * times the loss mask (verl), or on every token up to the last one with mask 1 (OpenRLHF: the reward
 * sits on the last action token and the cumulative return carries it back over masked tokens).
 */
export type BroadcastMode = 'allTokens' | 'maskedTokens' | 'throughLastToken';
/** Every way of broadcasting a sample's advantage to its tokens. */
export const BROADCAST_MODES = [
  'allTokens',
  'maskedTokens',
  'throughLastToken',
] as const satisfies readonly BroadcastMode[];

/** Every convention a preset fixes. Explicit options override single entries. */
export interface Conventions {
  /** Divide by the group std (`false` = Dr.GRPO: mean-centring only). */
  stdNormalization: boolean;
  /** Which std divides: the group's, the whole batch's (TRL `scale_rewards="batch"`), or none. */
  scale: Scale;
  /** Added to the std (outside the square root): slime/verl 1e-6, TRL 1e-4, OpenRLHF 1e-9. */
  epsilon: number;
  std: StdKind;
  singleton: SingletonPolicy;
  dtype: Dtype;
  /** How the group mean and std are computed (each trainer's torch calls, see `MomentsKind`). */
  moments: MomentsKind;
  /** How the trainer spreads a sequence advantage over tokens. */
  broadcast: BroadcastMode;
}

const base = { stdNormalization: true, scale: 'group', std: 'unbiased', dtype: 'float32' } as const;

/** The conventions of each trainer preset. */
export const PRESET_CONVENTIONS: Readonly<Record<Preset, Readonly<Conventions>>> = {
  slime: { ...base, epsilon: 1e-6, singleton: 'zero', moments: 'slime', broadcast: 'allTokens' },
  drGrpo: {
    ...base,
    stdNormalization: false,
    scale: 'none',
    epsilon: 1e-6,
    singleton: 'zero',
    moments: 'slime',
    broadcast: 'allTokens',
  },
  verl: { ...base, epsilon: 1e-6, singleton: 'raw', moments: 'verl', broadcast: 'maskedTokens' },
  verlVectorized: {
    ...base,
    epsilon: 1e-6,
    singleton: 'raw',
    moments: 'verlVectorized',
    broadcast: 'maskedTokens',
  },
  trl: { ...base, epsilon: 1e-4, singleton: 'zero', moments: 'trl', broadcast: 'allTokens' },
  openrlhf: {
    ...base,
    epsilon: 1e-9,
    singleton: 'error',
    moments: 'openrlhf',
    broadcast: 'throughLastToken',
  },
};

/** A trainer preset and the conventions that override it. */
export interface ConventionOptions {
  preset?: Preset | undefined;
  stdNormalization?: boolean | undefined;
  scale?: Scale | undefined;
  epsilon?: number | undefined;
  std?: StdKind | undefined;
  singleton?: SingletonPolicy | undefined;
  dtype?: Dtype | undefined;
  moments?: MomentsKind | undefined;
}

const oneOf = (field: string, value: unknown, allowed: readonly string[]) => {
  if (!allowed.includes(value as string)) {
    throw new ConfigError(
      `${field}: must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, found ${JSON.stringify(value)}`,
    );
  }
};

/** The preset's conventions (slime by default) with explicit options applied on top, validated. */
export function resolveConventions(options: ConventionOptions): Conventions {
  const preset = options.preset ?? 'slime';
  const chosen = PRESET_CONVENTIONS[preset];
  if (!chosen) {
    throw new ConfigError(
      `preset: unknown preset ${JSON.stringify(preset)}; use one of ${PRESETS.join(', ')}`,
    );
  }
  const out: Conventions = { ...chosen };
  if (options.stdNormalization !== undefined) {
    out.stdNormalization = options.stdNormalization;
    out.scale = options.stdNormalization ? (chosen.scale === 'none' ? 'group' : chosen.scale) : 'none';
  }
  if (options.scale !== undefined) {
    oneOf('scale', options.scale, ['group', 'batch', 'none']);
    if (options.stdNormalization === false && options.scale !== 'none') {
      throw new ConfigError(
        `scale: ${JSON.stringify(options.scale)} contradicts stdNormalization: false; drop one of them`,
      );
    }
    out.scale = options.scale;
    out.stdNormalization = options.scale !== 'none';
  }
  if (options.epsilon !== undefined) {
    if (!(Number.isFinite(options.epsilon) && options.epsilon >= 0)) {
      throw new ConfigError(`epsilon: must be a finite number ≥ 0, found ${options.epsilon}`);
    }
    out.epsilon = options.epsilon;
  }
  if (options.std !== undefined) {
    oneOf('std', options.std, ['unbiased', 'biased']);
    out.std = options.std;
  }
  if (options.singleton !== undefined) {
    oneOf('singleton', options.singleton, ['zero', 'raw', 'error']);
    out.singleton = options.singleton;
  }
  if (options.dtype !== undefined) {
    oneOf('dtype', options.dtype, ['float32', 'float64']);
    out.dtype = options.dtype;
  }
  if (options.moments !== undefined) {
    oneOf('moments', options.moments, MOMENTS_KINDS);
    out.moments = options.moments;
  }
  return out;
}
