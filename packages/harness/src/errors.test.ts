import { VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { HarnessError } from './errors.js';

describe('HarnessError', () => {
  it('has a guard of its own: true for harness errors from any copy, never for another VimeError', async () => {
    const secondCopy = './errors.js?second-copy';
    const copy = (await import(/* @vite-ignore */ secondCopy)) as typeof import('./errors.js');
    const foreign = new copy.HarnessError('harness_run', 'killed');
    expect(foreign instanceof HarnessError).toBe(false);
    expect(HarnessError.isInstance(foreign)).toBe(true);
    expect(HarnessError.isInstance(new VimeError('harness_run', 'x'))).toBe(false);
    class Stalled extends HarnessError {}
    expect(HarnessError.isInstance(new Stalled('harness_run', 'stalled'))).toBe(true);
  });
});
