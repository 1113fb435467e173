import { GradingError, VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { GradingSandboxLost } from './index.js';

describe('GradingSandboxLost', () => {
  it('has a guard of its own: true for itself and its subclasses, never for another grading error', () => {
    const lost = new GradingSandboxLost('the grading sandbox stopped answering');
    expect(GradingSandboxLost.isInstance(lost)).toBe(true);
    expect(GradingError.isInstance(lost)).toBe(true);
    expect(GradingSandboxLost.isInstance(new GradingError('no verdict'))).toBe(false);
    expect(GradingSandboxLost.isInstance(new VimeError('grading_error', 'x'))).toBe(false);
    class Evicted extends GradingSandboxLost {}
    expect(GradingSandboxLost.isInstance(new Evicted('evicted'))).toBe(true);
  });
});
