import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ConfigError,
  DriftError,
  EngineError,
  GradingError,
  SandboxError,
  ValidationError,
  VimeError,
} from './errors.js';
import { QueueError } from './queue/format.js';
import { assertSampleInvariants, createSample, fromSlimeDict } from './sample.js';
import { parseWith } from './validate.js';

describe('VimeError', () => {
  it('keeps code, cause and data, and subclasses keep their names', () => {
    const cause = new Error('socket hang up');
    const err = new EngineError('engine at http://e:30000 failed', { cause, isRetryable: true, status: 503 });
    expect(err).toBeInstanceOf(VimeError);
    expect(err.name).toBe('EngineError');
    expect(err.code).toBe('engine_error');
    expect(err.cause).toBe(cause);
    expect(err.isRetryable).toBe(true);
    expect(new ConfigError('x').code).toBe('invalid_config');
  });

  it('brand check survives a second copy of the package', async () => {
    // A second, independent instance of the module: what two bundled copies of @vime/core look like.
    const secondCopy = './errors.js?second-copy';
    const copy = (await import(/* @vite-ignore */ secondCopy)) as typeof import('./errors.js');
    expect(copy.VimeError).not.toBe(VimeError);
    const foreign = new copy.ValidationError('a.b', 'bad');
    expect(foreign instanceof VimeError).toBe(false);
    expect(VimeError.isInstance(foreign)).toBe(true);
    expect(copy.VimeError.isInstance(new ConfigError('x'))).toBe(true);
    expect(VimeError.isInstance(new Error('plain'))).toBe(false);
    expect(VimeError.isInstance(null)).toBe(false);
  });

  it('each class guard accepts only its own class and subclasses, across copies', async () => {
    const secondCopy = './errors.js?third-copy';
    const copy = (await import(/* @vite-ignore */ secondCopy)) as typeof import('./errors.js');
    const made = {
      ConfigError: new copy.ConfigError('c'),
      ValidationError: new copy.ValidationError('p', 'v'),
      EngineError: new copy.EngineError('e'),
      SandboxError: new copy.SandboxError('s'),
      GradingError: new copy.GradingError('g'),
      DriftError: new copy.DriftError('d'),
    };
    const guards = { ConfigError, ValidationError, EngineError, SandboxError, GradingError, DriftError };
    for (const [guardName, guard] of Object.entries(guards)) {
      for (const [madeName, error] of Object.entries(made)) {
        expect(guard.isInstance(error), `${guardName}.isInstance(${madeName})`).toBe(guardName === madeName);
      }
      expect(guard.isInstance(new copy.VimeError('x', 'plain'))).toBe(false);
    }
    class RetryableSandboxError extends SandboxError {}
    expect(SandboxError.isInstance(new RetryableSandboxError('sub'))).toBe(true);
    expect(VimeError.isInstance(made.DriftError)).toBe(true);
  });
});

describe('validation messages', () => {
  it('name the path, the kind found and what was expected', () => {
    const schema = z.object({ rows: z.array(z.object({ n: z.number().int() })) });
    expect(() => parseWith(schema, { rows: [{ n: 1 }, { n: 'x' }] }, 'config')).toThrowError(
      /invalid config: rows\[1\]\.n: .*expected number.*\(found string "x"\)/,
    );
    try {
      parseWith(schema, { rows: [{ n: 1.5 }] }, 'config');
    } catch (e) {
      expect(e).toBeInstanceOf(ValidationError);
      expect((e as ValidationError).path).toBe('rows[0].n');
    }
  });

  it('fromSlimeDict accepts a subset and rejects wrong types with the field path', () => {
    expect(fromSlimeDict({ tokens: [1, 2], response_length: 1 }).status).toBe('pending');
    expect(() => fromSlimeDict({ status: 'ok' })).toThrowError(/status/);
    expect(() => fromSlimeDict({ group_index: 'a' })).toThrowError(/group_index.*found string "a"/);
  });

  it('assertSampleInvariants checks per-token lengths', () => {
    const s = createSample({
      tokens: [1, 2, 3],
      response_length: 2,
      loss_mask: [1, 0],
      rollout_log_probs: [0],
    });
    expect(() => assertSampleInvariants(s)).toThrowError(
      /rollout_log_probs: expected one entry per response token \(2\)/,
    );
    expect(() => assertSampleInvariants(createSample({ tokens: [1], response_length: 3 }))).toThrowError(
      /response_length 3 exceeds/,
    );
  });
});

describe('QueueError', () => {
  it('has a guard of its own: true for queue errors and their subclasses, from any copy, never for another VimeError', async () => {
    const secondCopy = './queue/format.js?second-copy';
    const copy = (await import(/* @vite-ignore */ secondCopy)) as typeof import('./queue/format.js');
    expect(QueueError.isInstance(new QueueError('locked', { code: 'queue_locked' }))).toBe(true);
    expect(QueueError.isInstance(new VimeError('queue_error', 'not a queue error'))).toBe(false);
    expect(QueueError.isInstance(new ConfigError('x'))).toBe(false);
    const foreign = new copy.QueueError('from another copy');
    expect(foreign instanceof QueueError).toBe(false);
    expect(QueueError.isInstance(foreign)).toBe(true);
    class LockLost extends QueueError {}
    const sub = new LockLost('sub');
    expect(QueueError.isInstance(sub)).toBe(true);
    expect(VimeError.isInstance(sub)).toBe(true);
  });
});
