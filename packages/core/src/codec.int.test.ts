import { execFileSync } from 'node:child_process';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { decode, encode } from '@msgpack/msgpack';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeSamples, encodeSamples } from './codec.js';
import { VimeError } from './errors.js';
import { TrajectoryManager } from './proxy/trajectory/manager.js';
import { createSample, fromSlimeDict, type Sample, SLIME_SAMPLE_FIELDS, toSlimeDict } from './sample.js';

const f32 = fc.float({ noDefaultInfinity: false, noNaN: false });
// "__proto__" is refused at both ends (its own test below), so the round trip draws other keys.
const key = fc.string({ unit: 'binary' }).filter((k) => k !== '__proto__');
const json: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.string({ unit: 'binary' }),
    fc.integer(),
    fc.double({ noNaN: true }).filter((x) => !Object.is(x, -0)),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(key, tie('value'), { maxKeys: 4 }),
  ),
})).value;

const sampleArb: fc.Arbitrary<Sample> = fc
  .record({
    prompt: fc.oneof(
      fc.string({ unit: 'binary' }),
      fc.array(fc.record({ role: fc.constantFrom('system', 'user', 'assistant'), content: fc.string() }), {
        maxLength: 3,
      }),
    ),
    prefix: fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { maxLength: 20 }),
    response: fc.array(
      fc.tuple(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), fc.constantFrom(0, 1), f32),
      { maxLength: 40 },
    ),
    reward: fc.oneof(
      fc.double(),
      fc.constant(null),
      // A reward dict is written like free-form data, where a -0 becomes 0 (documented in the README).
      fc.dictionary(
        fc.string().filter((k) => k !== '__proto__'),
        fc.double({ noNaN: true }).map((x) => (Object.is(x, -0) ? 0 : x)),
        { maxKeys: 3 },
      ),
    ),
    status: fc.constantFrom('pending', 'completed', 'truncated', 'aborted', 'failed' as const),
    metadata: fc.dictionary(key, json, { maxKeys: 5 }),
    ids: fc.tuple(fc.option(fc.nat()), fc.option(fc.nat()), fc.option(fc.nat())),
    session: fc.option(fc.string({ unit: 'binary' })),
    ngt: fc.double(),
    withMask: fc.boolean(),
  })
  .map((r) =>
    createSample({
      prompt: r.prompt,
      group_index: r.ids[0],
      index: r.ids[1],
      rollout_id: r.ids[2],
      tokens: [...r.prefix, ...r.response.map((t) => t[0])],
      response_length: r.response.length,
      response: 'x'.repeat(r.response.length),
      loss_mask: r.withMask ? r.response.map((t) => t[1]) : null,
      rollout_log_probs: r.withMask ? r.response.map((t) => t[2]) : null,
      reward: r.reward as Sample['reward'],
      status: r.status,
      metadata: r.metadata as Record<string, unknown>,
      session_id: r.session,
      non_generation_time: r.ngt,
    }),
  );

/** Bit-level equality: typed arrays by bytes, numbers with Object.is (NaN, -0). */
function expectSameSample(actual: Sample, expected: Sample): void {
  for (const key of Object.keys(expected) as Array<keyof Sample>) {
    const a = actual[key];
    const e = expected[key];
    if (ArrayBuffer.isView(e)) {
      expect(ArrayBuffer.isView(a), key).toBe(true);
      expect(
        Buffer.from((a as Uint8Array).buffer, (a as Uint8Array).byteOffset, (a as Uint8Array).byteLength),
      ).toEqual(Buffer.from(e.buffer, e.byteOffset, e.byteLength));
      expect((a as object).constructor).toBe(e.constructor);
    } else if (typeof e === 'number') expect(Object.is(a, e), `${key}: ${String(a)} vs ${e}`).toBe(true);
    else expect(a, key).toEqual(e);
  }
}

describe('encodeSamples / decodeSamples', () => {
  it('round-trips random samples bit for bit (NaN/Infinity log probs, unicode metadata, empty responses)', () => {
    fc.assert(
      fc.property(fc.array(sampleArb, { maxLength: 6 }), (samples) => {
        const back = decodeSamples(encodeSamples(samples));
        expect(back).toHaveLength(samples.length);
        for (const [i, s] of back.entries()) expectSameSample(s, samples[i]!);
      }),
      { numRuns: 200 },
    );
  });

  it('writes every slime field, in to_dict order', () => {
    const [dict] = decodeRaw(
      encodeSamples([
        createSample({ tokens: [1, 2], response_length: 1, loss_mask: [1], rollout_log_probs: [-0.5] }),
      ]),
    );
    expect(Object.keys(dict!)).toEqual([...SLIME_SAMPLE_FIELDS]);
  });

  it('decodes batches written by a generic msgpack encoder (float64 log probs, bool masks, missing fields)', () => {
    const bytes = encode([
      {
        tokens: [5, 6, 7],
        response_length: 2,
        loss_mask: [true, false],
        rollout_log_probs: [-0.25, 0],
        status: 'completed',
        reward: 1,
      },
    ]);
    const [s] = decodeSamples(bytes);
    expect(Array.from(s!.tokens)).toEqual([5, 6, 7]);
    expect(Array.from(s!.loss_mask!)).toEqual([1, 0]);
    expect(s!.rollout_log_probs).toBeInstanceOf(Float32Array);
    expect(s!.status).toBe('completed');
    expect(s!.weight_versions).toEqual([]);
  });

  it('keeps keys slime does not define, as Sample.from_dict does', () => {
    const sample = createSample({ tokens: [1] });
    sample.extra = { custom_field: { a: 1 } };
    const back = decodeSamples(encodeSamples([sample]));
    expect(back[0]!.extra).toEqual({ custom_field: { a: 1 } });
    expect(toSlimeDict(back[0]!)).toMatchObject({ custom_field: { a: 1 } });
  });

  it('refuses a "__proto__" key at either end, naming where it is', () => {
    const nested = createSample({ tokens: [1] });
    nested.metadata = JSON.parse('{"a": [{"b": 1}, {"__proto__": {"reward": 1}}]}');
    expect(() => encodeSamples([nested])).toThrowError(
      /^\[0\]\.metadata\.a\[1\]\.__proto__: the key "__proto__" cannot/,
    );
    const extra = createSample({ tokens: [1] });
    extra.extra = JSON.parse('{"__proto__": 1}');
    expect(() => encodeSamples([extra])).toThrowError(/^\[0\]\.__proto__: the key "__proto__" cannot/);
    // what a Python peer could send: a field or a metadata key named __proto__
    const field = encode([JSON.parse('{"tokens": [1], "__proto__": {"reward": 1}}')]);
    expect(() => decodeSamples(field)).toThrowError(/^\[0\]\.__proto__: expected a field name other than/);
    const meta = encode([JSON.parse('{"tokens": [1], "metadata": {"x": {"__proto__": 1}}}')]);
    expect(() => decodeSamples(meta)).toThrowError(/^\[0\]\.metadata: the key "__proto__" cannot/);
    // a reward dict (slime allows one) at either end
    const reward = createSample({ tokens: [1] });
    reward.reward = JSON.parse('{"acc": 1, "__proto__": 0}');
    expect(() => encodeSamples([reward])).toThrowError(
      /^\[0\]\.reward\.__proto__: the key "__proto__" cannot/,
    );
    const sent = encode([JSON.parse('{"tokens": [1], "reward": {"__proto__": 0}}')]);
    expect(() => decodeSamples(sent)).toThrowError(/^\[0\]\.reward: the key "__proto__" cannot/);
  });

  it('names the field path, the kind found and what was expected', () => {
    // the fields every map carries, so each case fails where it means to
    const row = { tokens: [1], response_length: 0, status: 'completed' };
    const bad = encode([
      { ...row, tokens: [1, 2] },
      { ...row, tokens: [1, 'two'] },
    ]);
    expect(() => decodeSamples(bad)).toThrowError(/\[1\]\.tokens\[1\]: expected a number/);
    expect(() => decodeSamples(encode([{ ...row, status: 'done' }]))).toThrowError(/\[0\]\.status/);
    expect(() => decodeSamples(encode([{ ...row, tokens: [2 ** 40] }]))).toThrowError(
      /\[0\]\.tokens\[0\]: expected an int32, found number 1099511627776/,
    );
    expect(() => decodeSamples(encode([{ ...row, loss_mask: [2] }]))).toThrowError(
      /loss_mask\[0\]: expected 0 or 1/,
    );
    expect(() => decodeSamples(encode({ tokens: [] }))).toThrowError(/expected an array of sample maps/);
  });

  it('only ever throws VimeError on fuzzed bytes', () => {
    const valid = encodeSamples([
      createSample({
        tokens: [1, 2, 3],
        response_length: 2,
        loss_mask: [1, 0],
        rollout_log_probs: [-1, 0],
        metadata: { k: 'v' },
      }),
    ]);
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 200 }),
          fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 0, max: 255 })).map(([i, b]) => {
            const copy = valid.slice();
            copy[i] = b;
            return copy;
          }),
          fc.nat(valid.length - 1).map((n) => valid.slice(0, n)),
        ),
        (bytes) => {
          try {
            decodeSamples(bytes);
          } catch (error) {
            expect(VimeError.isInstance(error), String(error)).toBe(true);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('only ever throws VimeError on malformed objects', () => {
    fc.assert(
      fc.property(json, (value) => {
        try {
          decodeSamples(encode([value]));
          fromSlimeDict(value);
        } catch (error) {
          expect(VimeError.isInstance(error), String(error)).toBe(true);
        }
      }),
      { numRuns: 500 },
    );
  });
});

function decodeRaw(bytes: Uint8Array): Array<Record<string, unknown>> {
  // An independent decoder: the generic @msgpack/msgpack one.
  return decode(bytes) as Array<Record<string, unknown>>;
}

// Debian's interpreter, where python3-msgpack is installed (a python3 earlier on PATH may lack it).
const DEBIAN_PYTHON = '/usr/bin/python3';

describe('decoding bounds', () => {
  const sample = ({ tokens, response }: { tokens: number; response: number }) =>
    createSample({
      tokens: Int32Array.from({ length: tokens }, (_, k) => k),
      response_length: response,
      loss_mask: new Uint8Array(response).fill(1),
      rollout_log_probs: new Float32Array(response).fill(-0.5),
    });
  /** `count` one-byte empty maps: each would become a whole Sample with slime's defaults. */
  const emptyMaps = (count: number) => {
    const bytes = Buffer.alloc(5 + count, 0x80);
    bytes[0] = 0xdd;
    bytes.writeUInt32BE(count, 1);
    return bytes;
  };

  it('refuses more samples than maxSamples before building any (300 KB of empty maps)', () => {
    const heap = process.memoryUsage().heapUsed;
    for (const [bytes, cap] of [
      [emptyMaps(300_000), 1024],
      [emptyMaps(300_000), 299_999],
      [Buffer.from(encode(Array.from({ length: 20 }, () => ({ tokens: [1] })))), 19],
    ] as const) {
      let error: unknown;
      try {
        decodeSamples(bytes, { maxSamples: cap });
      } catch (e) {
        error = e;
      }
      expect(VimeError.isInstance(error)).toBe(true);
      expect((error as VimeError).code).toBe('decode_error');
      expect((error as Error).message).toContain(`exceed the cap of ${cap} (options.maxSamples)`);
    }
    expect(process.memoryUsage().heapUsed - heap).toBeLessThan(32 << 20);
    const three = encode(
      Array.from({ length: 3 }, () => ({ tokens: [], response_length: 0, status: 'failed' })),
    );
    expect(decodeSamples(three, { maxSamples: 3 })).toHaveLength(3);
  });

  it('refuses more per-token elements than maxElements, across the whole batch', () => {
    const rows = [sample({ tokens: 600, response: 100 }), sample({ tokens: 600, response: 100 })];
    const bytes = encodeSamples(rows);
    // tokens + loss_mask + rollout_log_probs of both rows: 2 × (600 + 100 + 100).
    expect(decodeSamples(bytes, { maxElements: 1600 })).toHaveLength(2);
    expect(() => decodeSamples(bytes, { maxElements: 1599 })).toThrow(
      /\[1\]\.\w+: \d+ elements exceed the batch's cap \(options\.maxElements\)/,
    );
    expect(() => decodeSamples(bytes, { maxElements: 10 })).toThrow(/^\[0\]\.tokens: 600 elements exceed/);
  });

  it('rejects a bad cap with a ConfigError naming the option', () => {
    expect(() => decodeSamples(emptyMaps(1), { maxSamples: -1 })).toThrow(
      /options\.maxSamples: expected an integer ≥ 0, found .*-1/,
    );
    expect(() => decodeSamples(emptyMaps(1), { maxElements: 1.5 })).toThrow(/options\.maxElements/);
  });
});

describe('hostile batches: samples without their fields', () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  /** Heap growth while the decode's result (or error) is still held: what a batch of `bytes` costs. */
  function cost(bytes: Uint8Array): { heap: number; error: unknown } {
    gc();
    const before = process.memoryUsage().heapUsed;
    let kept: unknown;
    try {
      kept = decodeSamples(bytes);
    } catch (e) {
      kept = e;
    }
    gc();
    const heap = process.memoryUsage().heapUsed - before;
    return { heap, error: Array.isArray(kept) ? undefined : kept };
  }
  const KB300 = 300 * 1024;
  /** 300 KB: an array32 frame of copies of one encoded map, after `head` (valid samples first). */
  const frame = (map: Uint8Array, head: Uint8Array[] = []) => {
    const headBytes = head.reduce((n, h) => n + h.length, 0);
    const count = Math.floor((KB300 - 5 - headBytes) / map.length);
    const out = Buffer.alloc(5 + headBytes + count * map.length);
    out[0] = 0xdd;
    out.writeUInt32BE(head.length + count, 1);
    let at = 5;
    for (const h of [...head, ...Array.from({ length: count }, () => map)]) {
      out.set(h, at);
      at += h.length;
    }
    return out;
  };
  const ok = encode({ tokens: [1, 2], response_length: 1, status: 'completed' });
  // Each spelling is 300 KB that today decodes into thousands of whole samples.
  const spellings: Array<[string, Uint8Array, RegExp]> = [
    ['307,195 empty fixmaps', frame(Uint8Array.of(0x80)), /^\[0\]\.tokens: missing field/],
    ['empty map16s', frame(Uint8Array.of(0xde, 0, 0)), /^\[0\]\.tokens: missing field/],
    [
      'maps of an unknown key, padded to 40 bytes',
      frame(encode({ x: 'y'.repeat(35) })),
      /^\[0\]\.tokens: missing field/,
    ],
    [
      'tokens only',
      frame(encode({ tokens: [], pad: 'p'.repeat(24) })),
      /^\[0\]\.response_length: missing field/,
    ],
    [
      'no status, after two good samples',
      frame(encode({ tokens: [], response_length: 0, pad: 'p'.repeat(16) }), [ok, ok]),
      /^\[2\]\.status: missing field/,
    ],
  ];
  for (const [name, bytes, message] of spellings) {
    it(`refuses ${name} with a decode_error naming the index and field, in under 10 MB`, () => {
      expect(bytes.length).toBeGreaterThan(KB300 - 64);
      expect(bytes.length).toBeLessThanOrEqual(KB300);
      const { heap, error } = cost(bytes);
      expect(VimeError.isInstance(error), String(error)).toBe(true);
      expect((error as VimeError).code).toBe('decode_error');
      expect((error as Error).message).toMatch(message);
      expect((error as Error).message).toMatch(/tokens, response_length, status/);
      expect(heap).toBeLessThan(10 * 1024 * 1024);
    });
  }

  it('keeps the memory of 300 KB of the smallest valid samples under 10 MB', () => {
    const smallest = encode({ tokens: [], response_length: 0, status: 'failed' });
    expect(smallest.length).toBe(40);
    const bytes = frame(smallest);
    const { heap, error } = cost(bytes);
    expect(error).toBeUndefined();
    expect(heap).toBeLessThan(10 * 1024 * 1024);
  });
});

describe('Python interop', () => {
  it('a batch with rollout_routed_experts decodes, in Python, to what slime replays: (len(tokens) − 1, layers, top-k) ints', () => {
    const tokens = [151644, 872, 0, 42, 43, 44];
    // 5 positions × 2 layers × top-2, one distinct id each
    const routes = Array.from({ length: tokens.length - 1 }, (_, q) => [
      [q * 4, q * 4 + 1],
      [q * 4 + 2, q * 4 + 3],
    ]);
    const sample = createSample({
      tokens,
      response_length: 3,
      loss_mask: [1, 0, 1],
      rollout_log_probs: [-0.5, 0, -0.25],
      rollout_routed_experts: routes,
      reward: 1,
      status: 'completed',
    });
    const bytes = encodeSamples([sample, createSample({ tokens: [1, 2], status: 'aborted' })]);
    expect(decodeSamples(bytes)[0]!.rollout_routed_experts).toEqual(routes);
    // What slime does with the field: torch.as_tensor(sample.rollout_routed_experts) per sample
    // (slime/ray/rollout.py), then requires ndim 3, shape[1:] == (num_layers, moe_router_topk)
    // (slime/observability/rollout_data_utils.py) and shape[0] == len(tokens) − 1
    // (slime/backends/megatron_utils/cp_utils.py), THUDM/slime@624b824; numpy stands in for torch.
    const script = `
import sys, json, msgpack, numpy as np
rows = msgpack.unpackb(sys.stdin.buffer.read(), raw=False)
r = rows[0]
a = np.asarray(r["rollout_routed_experts"])
assert a.ndim == 3 and a.shape[1:] == (2, 2), a.shape
assert a.shape[0] == len(r["tokens"]) - 1
assert np.issubdtype(a.dtype, np.integer), a.dtype
assert rows[1]["rollout_routed_experts"] is None
print(json.dumps({"shape": list(a.shape), "flat": a.reshape(-1).tolist()}))
`;
    const out = JSON.parse(execFileSync(DEBIAN_PYTHON, ['-c', script], { input: bytes }).toString());
    expect(out).toEqual({ shape: [5, 2, 2], flat: Array.from({ length: 20 }, (_, i) => i) });
  });

  it("decodes with Python's msgpack into dicts with slime's field set and types", () => {
    const samples = [
      createSample({
        group_index: 3,
        index: 7,
        rollout_id: 7,
        prompt: [{ role: 'user', content: 'fix ünïcode 🐛' }],
        tokens: [151644, 872, 0, 42, 43, 44],
        response: 'ok',
        response_length: 3,
        loss_mask: [1, 0, 1],
        rollout_log_probs: [-0.125, 0, Number.NEGATIVE_INFINITY],
        reward: 1,
        status: 'completed',
        metadata: { instance_id: 'x__y.1', nested: { n: [1, 2.5] } },
        session_id: 's-1',
        weight_versions: ['3'],
      }),
      createSample({ tokens: [], status: 'aborted' }),
    ];
    const script = `
import sys, json, math, msgpack
rows = msgpack.unpackb(sys.stdin.buffer.read(), raw=False)
assert isinstance(rows, list) and all(isinstance(r, dict) for r in rows)
out = []
for r in rows:
    types = {k: type(v).__name__ for k, v in r.items()}
    assert all(isinstance(t, int) and not isinstance(t, bool) for t in r["tokens"])
    if r["loss_mask"] is not None: assert all(isinstance(m, int) for m in r["loss_mask"])
    if r["rollout_log_probs"] is not None: assert all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in r["rollout_log_probs"])
    assert isinstance(r["status"], str)
    lp = r["rollout_log_probs"]
    out.append({"keys": list(r.keys()), "types": types, "lp": [repr(x) for x in lp] if lp else None, "reward": r["reward"], "prompt": r["prompt"]})
print(json.dumps(out))
`;
    const stdout = execFileSync(DEBIAN_PYTHON, ['-c', script], { input: encodeSamples(samples) }).toString();
    const rows = JSON.parse(stdout) as Array<{
      keys: string[];
      types: Record<string, string>;
      lp: string[] | null;
      reward: unknown;
      prompt: unknown;
    }>;
    expect(rows[0]!.keys).toEqual([...SLIME_SAMPLE_FIELDS]);
    expect(rows[0]!.types).toMatchObject({
      group_index: 'int',
      tokens: 'list',
      loss_mask: 'list',
      rollout_log_probs: 'list',
      reward: 'float',
      status: 'str',
      metadata: 'dict',
      spec_info: 'dict',
      prefix_cache_info: 'dict',
      non_generation_time: 'float',
      weight_versions: 'list',
      remove_sample: 'bool',
    });
    expect(rows[0]!.lp).toEqual(['-0.125', '0', '-inf']);
    expect(rows[0]!.prompt).toEqual([{ role: 'user', content: 'fix ünïcode 🐛' }]);
    expect(rows[1]!.types).toMatchObject({
      loss_mask: 'NoneType',
      reward: 'NoneType',
      group_index: 'NoneType',
    });
  });

  it('carries the top-k heads to Python as rollout_topk_token_ids / rollout_topk_log_probs, one list of k per response token', () => {
    // Rows packed by the trajectory manager: two turns with heads (k = 3), an observation between them.
    const m = new TrajectoryManager();
    const head = (out: number[]) => ({
      k: 3,
      ids: Int32Array.from(out.flatMap((id) => [id, id + 100, id + 200])),
      logprobs: Float32Array.from(out.flatMap(() => [-0.25, -2, -3.5])),
    });
    const turn = (prompt: number[], out: number[]) => ({
      promptIds: Int32Array.from(prompt),
      outputIds: Int32Array.from(out),
      logprobs: Float32Array.from(out, () => -0.25),
      finishReason: 'stop' as const,
      startedAt: 0,
      endedAt: 1,
      topK: head(out),
    });
    m.record('s', turn([1, 2], [10, 11]));
    m.record('s', turn([1, 2, 10, 11, 50], [20]));
    const samples = m.finish('s', { reward: 1 });
    const script = `
import sys, json, msgpack
rows = msgpack.unpackb(sys.stdin.buffer.read(), raw=False)
r = rows[0]
ids, lps = r["rollout_topk_token_ids"], r["rollout_topk_log_probs"]
assert all(isinstance(x, int) and not isinstance(x, bool) for row in ids for x in row)
# msgpack writes a whole-number log prob (-2.0) as an int: both load as numbers (torch.as_tensor casts)
assert all(isinstance(x, (int, float)) and not isinstance(x, bool) for row in lps for x in row)
print(json.dumps({"keys": list(r.keys()), "n": r["response_length"], "ids": ids, "lps": lps}))
`;
    const stdout = execFileSync(DEBIAN_PYTHON, ['-c', script], { input: encodeSamples(samples) }).toString();
    const out = JSON.parse(stdout) as { keys: string[]; n: number; ids: number[][]; lps: number[][] };
    // slime's fields, and the two its Sample.from_dict sets as attributes (it declares no top-k field).
    const known = new Set<string>(SLIME_SAMPLE_FIELDS);
    expect(out.keys.filter((k) => known.has(k))).toEqual([...SLIME_SAMPLE_FIELDS]);
    expect(out.keys.filter((k) => !known.has(k))).toEqual([
      'rollout_topk_token_ids',
      'rollout_topk_log_probs',
    ]);
    expect(out.n).toBe(4);
    expect(out.ids).toEqual([
      [10, 110, 210],
      [11, 111, 211],
      [0, 1, 2],
      [20, 120, 220],
    ]);
    const filler = Math.fround(-Math.log(3));
    expect(out.lps).toEqual([
      [-0.25, -2, -3.5],
      [-0.25, -2, -3.5],
      [filler, filler, filler],
      [-0.25, -2, -3.5],
    ]);
  });
});
