import { ConfigError } from '@vime/core';
import type { Dtype } from './f32.js';

/** The trainers whose GRPO conventions the SDK reproduces. `drGrpo` is slime with std normalization off. */
export type Preset = 'slime' | 'verl' | 'trl' | 'openrlhf' | 'drGrpo';
export const PRESETS = ['slime', 'verl', 'trl', 'openrlhf', 'drGrpo'] as const satisfies readonly Preset[];

export type Scale = 'group' | 'batch' | 'none';
export type StdKind = 'unbiased' | 'biased';
/** What a group of one sample gets: 0 (slime, TRL), its raw reward (verl), or an error (OpenRLHF asserts). */
export type SingletonPolicy = 'zero' | 'raw' | 'error';
export type BroadcastMode = 'allTokens' | 'maskedTokens';

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
  /** How the trainer spreads a sequence advantage over tokens. */
  broadcast: BroadcastMode;
}

export const PRESET_CONVENTIONS: Readonly<Record<Preset, Readonly<Conventions>>> = {
  slime: {
    stdNormalization: true,
    scale: 'group',
    epsilon: 1e-6,
    std: 'unbiased',
    singleton: 'zero',
    dtype: 'float32',
    broadcast: 'allTokens',
  },
  drGrpo: {
    stdNormalization: false,
    scale: 'none',
    epsilon: 1e-6,
    std: 'unbiased',
    singleton: 'zero',
    dtype: 'float32',
    broadcast: 'allTokens',
  },
  verl: {
    stdNormalization: true,
    scale: 'group',
    epsilon: 1e-6,
    std: 'unbiased',
    singleton: 'raw',
    dtype: 'float32',
    broadcast: 'maskedTokens',
  },
  trl: {
    stdNormalization: true,
    scale: 'group',
    epsilon: 1e-4,
    std: 'unbiased',
    singleton: 'zero',
    dtype: 'float32',
    broadcast: 'allTokens',
  },
  openrlhf: {
    stdNormalization: true,
    scale: 'group',
    epsilon: 1e-9,
    std: 'unbiased',
    singleton: 'error',
    dtype: 'float32',
    broadcast: 'maskedTokens',
  },
};

export interface ConventionOptions {
  preset?: Preset;
  stdNormalization?: boolean;
  scale?: Scale;
  epsilon?: number;
  std?: StdKind;
  singleton?: SingletonPolicy;
  dtype?: Dtype;
}

/** The preset's conventions (slime by default) with explicit options applied on top, validated. */
export function resolveConventions(options: ConventionOptions): Conventions {
  const preset = options.preset ?? 'slime';
  const base = PRESET_CONVENTIONS[preset];
  if (!base) {
    throw new ConfigError(
      `preset: unknown preset ${JSON.stringify(preset)}; use one of ${PRESETS.join(', ')}`,
    );
  }
  const out: Conventions = { ...base };
  if (options.stdNormalization !== undefined) {
    out.stdNormalization = options.stdNormalization;
    out.scale = options.stdNormalization ? (base.scale === 'none' ? 'group' : base.scale) : 'none';
  }
  if (options.scale !== undefined) {
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
    if (options.std !== 'unbiased' && options.std !== 'biased') {
      throw new ConfigError(`std: must be 'unbiased' or 'biased', found ${JSON.stringify(options.std)}`);
    }
    out.std = options.std;
  }
  if (options.singleton !== undefined) {
    if (!['zero', 'raw', 'error'].includes(options.singleton)) {
      throw new ConfigError(
        `singleton: must be 'zero', 'raw' or 'error', found ${JSON.stringify(options.singleton)}`,
      );
    }
    out.singleton = options.singleton;
  }
  if (options.dtype !== undefined) {
    if (options.dtype !== 'float32' && options.dtype !== 'float64') {
      throw new ConfigError(`dtype: must be 'float32' or 'float64', found ${JSON.stringify(options.dtype)}`);
    }
    out.dtype = options.dtype;
  }
  return out;
}
