/**
 * Write the demo batch the Megatron trainer reads: `encodeSamples` msgpack, one slime sample dict each.
 *
 *   node --import tsx --conditions=@vime/source src/make-batch.ts --out batch.msgpack [--vocab 1000] [--seed N]
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { ConfigError, encodeSamples, VimeError } from '@vime/core';
import { pathError } from '@vime/core/utils';
import { makeDemoBatch } from './batch.js';

const HELP = `Usage: make-batch.ts [--out FILE] [--vocab N] [--seed N]

Write the demo sample batch (msgpack, slime sample dicts) that the Megatron trainer reads.

  --out FILE   where to write it (default batch.msgpack)
  --vocab N    vocabulary size of the trainer's model, at least 2 (default 1000)
  --seed N     seed of the batch's token ids (default 20261130)
  -h, --help   show this help

Exit codes: 0 written, 1 the write failed, 2 invalid usage.
`;

function integer(value: string, flag: string, min: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < min) {
    const want = min === Number.MIN_SAFE_INTEGER ? 'a whole number' : `a whole number >= ${min}`;
    throw new ConfigError(`${flag} must be ${want}, got ${JSON.stringify(value)}`);
  }
  return n;
}

async function main(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(HELP);
    return 0;
  }
  let values: { out: string; vocab: string; seed: string };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        out: { type: 'string', default: 'batch.msgpack' },
        vocab: { type: 'string', default: '1000' },
        seed: { type: 'string', default: '20261130' },
      },
    }));
  } catch (cause) {
    const message = (cause as Error).message.split('\n')[0]!.replace(/\. To specify.*$/, '');
    throw new ConfigError(`${message}; see --help`, { cause });
  }
  const vocabSize = integer(values.vocab, '--vocab', 2);
  const seed = integer(values.seed, '--seed', Number.MIN_SAFE_INTEGER);

  const samples = makeDemoBatch({ vocabSize, seed });
  const bytes = encodeSamples(samples);
  await writeFile(values.out, bytes).catch((error: unknown) => {
    throw pathError(error, '--out', values.out, 'write it');
  });
  const tokens = samples.reduce((n, s) => n + s.tokens.length, 0);
  process.stdout.write(
    `wrote ${samples.length} samples (${tokens} tokens, rewards ${samples.map((s) => s.reward).join(' ')}) ` +
      `to ${values.out} (${bytes.length} bytes)\n`,
  );
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const usage = VimeError.isInstance(error) && error.code === 'invalid_config';
    process.stderr.write(`make-batch: ${(error as Error).message}\n`);
    process.exit(usage ? 2 : 1);
  },
);
