import { VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { gae } from './gae.js';
import { discountedReturns } from './returns.js';

const list = (x: ArrayLike<number>) => Array.from(x);

function throwsVime(run: () => unknown, message: RegExp) {
  let error: unknown;
  try {
    run();
  } catch (e) {
    error = e;
  }
  expect(VimeError.isInstance(error), `expected a VimeError matching ${message}`).toBe(true);
  expect((error as Error).message).toMatch(message);
}

describe('returns and GAE', () => {
  it('discounted returns are cut after a mask-0 token when asked (verl)', () => {
    expect(list(discountedReturns([0, 0, 1, 0, 2], [5], 1, { dtype: 'float64' }))).toEqual([3, 3, 3, 2, 2]);
    expect(
      list(discountedReturns([0, 0, 1, 0, 2], [5], 1, { resetMask: [1, 1, 0, 1, 1], dtype: 'float64' })),
    ).toEqual([0, 0, 3, 2, 2]);
    throwsVime(() => discountedReturns([1], [1], 1.5), /gamma/);
  });

  it('GAE skips observation tokens with an observation mask', () => {
    const plain = gae({
      tokenRewards: [0, 0, 1],
      values: [0.5, 0.5, 0.5],
      responseLengths: [3],
      gamma: 1,
      lambda: 1,
      dtype: 'float64',
    });
    expect(list(plain.advantages)).toEqual([0.5, 0.5, 0.5]);
    const skipped = gae({
      tokenRewards: [0, 9, 1],
      values: [0.5, 7, 0.5],
      responseLengths: [3],
      gamma: 1,
      lambda: 1,
      observationMask: [1, 0, 1],
      dtype: 'float64',
    });
    // The observation token neither adds its reward/value nor breaks the chain.
    expect(list(skipped.advantages)).toEqual([0.5, 0.5, 0.5]);
    throwsVime(
      () => gae({ tokenRewards: [0], values: [0, 1], responseLengths: [1], gamma: 1, lambda: 1 }),
      /values.*2 values/,
    );
  });
});
