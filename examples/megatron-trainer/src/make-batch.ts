/**
 * Write the demo batch the Megatron trainer reads: `encodeSamples` msgpack, one slime sample dict each.
 *
 *   node --import tsx --conditions=@vime/source src/make-batch.ts --out batch.msgpack [--vocab 1000] [--seed N]
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { encodeSamples } from '@vime/core';
import { makeDemoBatch } from './batch.js';

const { values } = parseArgs({
  options: {
    out: { type: 'string', default: 'batch.msgpack' },
    vocab: { type: 'string', default: '1000' },
    seed: { type: 'string', default: '20261130' },
  },
});
const vocabSize = Number(values.vocab);
const seed = Number(values.seed);
if (!Number.isInteger(vocabSize) || vocabSize < 2) {
  console.error(`--vocab must be an integer >= 2, got ${JSON.stringify(values.vocab)}`);
  process.exit(2);
}
if (!Number.isInteger(seed)) {
  console.error(`--seed must be an integer, got ${JSON.stringify(values.seed)}`);
  process.exit(2);
}

const samples = makeDemoBatch({ vocabSize, seed });
const bytes = encodeSamples(samples);
writeFileSync(values.out, bytes);
const tokens = samples.reduce((n, s) => n + s.tokens.length, 0);
console.log(
  `wrote ${samples.length} samples (${tokens} tokens, rewards ${samples.map((s) => s.reward).join(' ')}) ` +
    `to ${values.out} (${bytes.length} bytes)`,
);
