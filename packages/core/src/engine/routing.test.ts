import { describe, expect, it } from 'vitest';
import { EngineError } from '../errors.js';
import { encodeBase64Array } from './nucleus.js';
import {
  concatRoutes,
  encodeNpy,
  parseNpy,
  type RoutedExperts,
  readSglangRoutes,
  readVllmRoutes,
  turnRoutes,
} from './routing.js';

// Written by numpy 2.4.6: np.save(buf, np.arange(12, dtype=np.uint8).reshape(2, 3, 2)) and the same
// array times 1000 as int32 (vLLM's `numpy2base64` of the routed experts is such a file, base64).
const NUMPY_U1 =
  'k05VTVBZAQB2AHsnZGVzY3InOiAnfHUxJywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDIsIDMsIDIpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAQIDBAUGBwgJCgs=';
const NUMPY_I4 =
  'k05VTVBZAQB2AHsnZGVzY3InOiAnPGk0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDIsIDMsIDIpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAA6AMAANAHAAC4CwAAoA8AAIgTAABwFwAAWBsAAEAfAAAoIwAAECcAAPgqAAA=';
const range = (n: number, scale = 1) => Array.from({ length: n }, (_, i) => i * scale);
const SHAPE = { layers: 3, topK: 2 };

describe('routing replay wire: .npy (vLLM)', () => {
  it('reads the files numpy writes (uint8, int32) and writes int32 byte for byte as numpy does', () => {
    const u1 = parseNpy(Buffer.from(NUMPY_U1, 'base64'));
    expect(u1.shape).toEqual([2, 3, 2]);
    expect(Array.from(u1.values)).toEqual(range(12));
    const i4 = parseNpy(Buffer.from(NUMPY_I4, 'base64'));
    expect(Array.from(i4.values)).toEqual(range(12, 1000));
    const mine = encodeNpy(Int32Array.from(range(12, 1000)), [2, 3, 2]);
    expect(Buffer.from(mine).toString('base64')).toBe(NUMPY_I4);
  });

  it('checks the shape against the generation: (prompt + output − 1, layers, topK)', () => {
    // prompt 2 + output 1 − 1 = 2 positions
    const ok = readVllmRoutes(NUMPY_U1, { promptTokens: 2, outputTokens: 1, start: 0 }, SHAPE, 'http://e');
    expect(ok).toMatchObject({ start: 0, layers: 3, topK: 2 });
    expect(() =>
      readVllmRoutes(NUMPY_U1, { promptTokens: 2, outputTokens: 2, start: 0 }, SHAPE, 'http://e'),
    ).toThrow(/expected shape \(3, 3, 2\).*found \(2, 3, 2\)/);
    expect(() =>
      readVllmRoutes(
        NUMPY_U1,
        { promptTokens: 2, outputTokens: 1, start: 0 },
        { layers: 2, topK: 3 },
        'http://e',
      ),
    ).toThrow(/expected shape \(2, 2, 3\)/);
    expect(() =>
      readVllmRoutes(null, { promptTokens: 2, outputTokens: 1, start: 0 }, SHAPE, 'http://e'),
    ).toThrow(
      /choices\[0\]\.routed_experts: routing replay needs .* found none; serve with --enable-return-routed-experts/,
    );
    expect(() =>
      readVllmRoutes('AAAA', { promptTokens: 2, outputTokens: 1, start: 0 }, SHAPE, 'http://e'),
    ).toThrow(/not a \.npy file/);
  });
});

describe('routing replay wire: base64 int32 (SGLang)', () => {
  it('reads meta_info.routed_experts and fails closed on a missing or mis-sized one', () => {
    const g = { promptTokens: 3, outputTokens: 2, start: 0 };
    const flat = Int32Array.from(range(4 * 6));
    const routes = readSglangRoutes({ routed_experts: encodeBase64Array(flat) }, g, SHAPE, 'http://e');
    expect(Array.from(routes.experts)).toEqual(Array.from(flat));
    const short = encodeBase64Array(flat.subarray(0, 18));
    expect(() => readSglangRoutes({ routed_experts: short }, g, SHAPE, 'http://e')).toThrow(
      /expected 24 expert ids \(4 positions × 3 layers × top-2: prompt 3 \+ output 2 − 1 − start 0\), found 18/,
    );
    const error = (() => {
      try {
        readSglangRoutes({}, g, SHAPE, 'http://e');
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(EngineError);
    expect((error as EngineError).isRetryable).toBe(false);
    expect((error as Error).message).toMatch(/meta_info\.routed_experts: routing replay needs/);
  });
});

describe('a turn’s routing', () => {
  const part = (start: number, rows: number, base: number): RoutedExperts => ({
    ...SHAPE,
    start,
    experts: Int32Array.from({ length: rows * 6 }, (_, i) => base + i),
  });

  it('a continuation’s rows follow its predecessor’s: rows it shares come from the first generation', () => {
    // prompt 4: the first generation made 2 tokens (rows [0, 5)), the continuation 3 more (rows [0, 8))
    const joined = concatRoutes([part(0, 5, 0), part(0, 8, 1000)])!;
    expect(joined.start).toBe(0);
    expect(joined.experts.length).toBe(8 * 6);
    expect(Array.from(joined.experts.subarray(0, 30))).toEqual(range(30));
    expect(Array.from(joined.experts.subarray(30))).toEqual(range(18).map((i) => 1030 + i));
    expect(concatRoutes([part(0, 5, 0), undefined])).toBeUndefined();
  });

  it('fails closed: routing asked and none returned, or not one row per forwarded position', () => {
    const outputIds = Int32Array.from([7, 8]);
    expect(turnRoutes(undefined, { outputIds, engines: ['http://e'] }, 4)).toBeUndefined();
    expect(() => turnRoutes(SHAPE, { outputIds, engines: ['http://e'] }, 4)).toThrow(
      /http:\/\/e: routing replay is on, but the engine returned no routed experts/,
    );
    expect(() => turnRoutes(SHAPE, { outputIds, routes: part(0, 4, 0), engines: ['http://e'] }, 4)).toThrow(
      /expected 5 positions \(prompt 4 \+ output 2 − 1\).*found 4 positions/,
    );
    const fine = part(0, 5, 0);
    expect(turnRoutes(SHAPE, { outputIds, routes: fine, engines: ['http://e'] }, 4)).toBe(fine);
  });
});
