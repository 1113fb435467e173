import { EngineError, VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { RayJobFailedError, RayJobsError } from './client.js';
import type { JobDetails } from './types.js';

const job = { submission_id: 'vime-1', status: 'FAILED', message: 'boom' } as JobDetails;

describe('Ray errors', () => {
  it('each class has a guard of its own, true for itself and its subclasses, from any copy', async () => {
    const secondCopy = './client.js?second-copy';
    const copy = (await import(/* @vite-ignore */ secondCopy)) as typeof import('./client.js');
    const failed = new copy.RayJobFailedError(job, 'Traceback …');
    expect(failed instanceof RayJobFailedError).toBe(false);
    expect(RayJobFailedError.isInstance(failed)).toBe(true);
    expect(RayJobsError.isInstance(failed)).toBe(true);
    expect(EngineError.isInstance(failed)).toBe(true);
    expect(RayJobsError.isInstance(new copy.RayJobsError('HTTP 500'))).toBe(true);
    expect(RayJobFailedError.isInstance(new RayJobsError('HTTP 500'))).toBe(false);
    expect(RayJobsError.isInstance(new EngineError('engine down'))).toBe(false);
    expect(RayJobsError.isInstance(new VimeError('engine_error', 'x'))).toBe(false);
  });
});
