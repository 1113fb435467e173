import { createSample, decodeSamples, encodeSamples, type Sample, toSlimeDict } from '@vime/core';
import { type Bench, fmt, time } from './harness.js';

/**
 * Token ids drawn from the id-size mix of Qwen3's tokenization of source code and prose (measured on this
 * repository's sources: 24% below 128, 5% below 256, 69% below 65,536, 2% above).
 */
function tokenId(rand: () => number): number {
  const u = rand();
  const v = rand();
  if (u < 0.24) return Math.floor(v * 128);
  if (u < 0.29) return 128 + Math.floor(v * 128);
  if (u < 0.98) return 256 + Math.floor(v * 65_280);
  return 65_536 + Math.floor(v * 86_000);
}

/** A batch shaped like a coding-agent rollout step: 184 samples × 32,768 tokens, 2k prompt, 25% observation tokens. */
function makeBatch(samples = 184, tokens = 32_768, promptTokens = 2_048): Sample[] {
  let seed = 42;
  const rand = () => {
    seed = (seed * 1664525 + 1013904223) >>> 0;
    return seed / 2 ** 32;
  };
  return Array.from({ length: samples }, (_, i) => {
    const n = tokens - promptTokens;
    const ids = new Int32Array(tokens);
    for (let t = 0; t < tokens; t++) ids[t] = tokenId(rand);
    const mask = new Uint8Array(n);
    const logprobs = new Float32Array(n);
    for (let t = 0; t < n; t++) {
      mask[t] = (t >> 9) % 4 === 3 ? 0 : 1; // a 512-token observation after every 1,536 model tokens
      // Sampled tokens are mostly confident: 70% with p in (0.9, 1), the rest uniform.
      const p = rand() < 0.7 ? 1 - rand() * 0.1 : rand();
      logprobs[t] = mask[t] ? Math.log(p) : 0;
    }
    return createSample({
      group_index: i >> 3,
      index: i,
      rollout_id: i,
      prompt: 'Fix the bug described in the issue.',
      tokens: ids,
      response_length: n,
      loss_mask: mask,
      rollout_log_probs: logprobs,
      reward: i % 3 === 0 ? 1 : 0,
      status: 'completed',
      metadata: { instance_id: `repo__name.${i}`, turns: 12 },
      session_id: `s-${i}`,
    });
  });
}

export default {
  name: 'codec',
  description: 'sample batch msgpack codec vs JSON for 184 samples × 32,768 tokens',
  async run() {
    const batch = makeBatch();
    const dicts = batch.map(toSlimeDict);
    let bytes = encodeSamples(batch);
    let text = JSON.stringify(dicts);
    const enc = await time(
      () => {
        bytes = encodeSamples(batch);
      },
      { iterations: 5, warmup: 1 },
    );
    const dec = await time(() => decodeSamples(bytes), { iterations: 5, warmup: 1 });
    const jenc = await time(
      () => {
        text = JSON.stringify(dicts);
      },
      { iterations: 3, warmup: 1 },
    );
    const jdec = await time(() => JSON.parse(text), { iterations: 3, warmup: 1 });
    const jsonBytes = Buffer.byteLength(text);
    const speedup = (jenc.median + jdec.median) / (enc.median + dec.median);
    const smaller = jsonBytes / bytes.length;
    return [
      {
        title: 'encode + decode, 184 samples × 32,768 tokens (median ms)',
        columns: ['format', 'encode', 'decode', 'total', 'size'],
        rows: [
          [
            'vime msgpack (typed arrays in, typed arrays out)',
            fmt.ms(enc.median),
            fmt.ms(dec.median),
            fmt.ms(enc.median + dec.median),
            fmt.bytes(bytes.length),
          ],
          [
            'JSON.stringify / JSON.parse of the same dicts',
            fmt.ms(jenc.median),
            fmt.ms(jdec.median),
            fmt.ms(jenc.median + jdec.median),
            fmt.bytes(jsonBytes),
          ],
        ],
        checks: [
          {
            target: 'msgpack at least 5× faster than JSON (encode + decode)',
            measured: fmt.ratio(speedup),
            ok: speedup >= 5,
          },
          {
            target: 'msgpack batch at least 3× smaller than JSON',
            measured: fmt.ratio(smaller),
            ok: smaller >= 3,
          },
        ],
        notes: ['JSON timings exclude the typed-array → list conversion (favouring JSON).'],
      },
    ];
  },
} satisfies Bench;
