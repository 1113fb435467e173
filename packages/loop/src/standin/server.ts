/**
 * Start a stand-in engine as its own process, serving the coding policy over SGLang's wire, so the loop
 * can be pointed at it with `--engine-url` exactly as at a real SGLang server. It prints its URL and
 * runs until SIGINT/SIGTERM. A stand-in, not a model.
 *
 *   vime-standin [flags]
 */

import { appendFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadTokenizer } from '@vime/core/engine';
import { startStandInEngine } from '@vime/core/standin';
import { type CliIo, EXIT, oneOf, parseFlags, UsageError, wantsHelp } from '@vime/core/utils';
import { checkConfig } from '../config/resolve.js';
import { bundledTokenizerDir } from '../defaults.js';
import { readTasks } from '../tasks.js';
import { debuggerPolicy } from './debugger.js';
import { codingAgentPolicy } from './policy.js';

const USAGE = `Usage: vime-standin [--port N] [--tps N] [--slots N] [--seed N] [--dataset FILE] [--tokenizer DIR]
                    [--tokenize sglang|vllm|none] [--record FILE] [--policy scripted|debugger]

A stand-in engine (a scripted coding policy behind SGLang's wire, not a model) in its own process.
  --port N          port (default: any free one)
  --tps N           decode tokens/s (default 4000)
  --slots N         concurrent requests (default 16)
  --seed N          seed of the scripted policy (default 7)
  --dataset FILE    the tasks whose gold patches the policy knows (default: the offline task set)
  --tokenizer DIR   the vocabulary it serves (default: the bundled Qwen3 tokenizer)
  --tokenize WIRE   whose /tokenize and /detokenize it answers: sglang (default), vllm, or none
  --record FILE     append every generation request it receives as a JSON line (rid, path, sampling)
  --policy NAME     scripted (default: the gold fix, a wrong fix or malformed output by the odds) or
                    debugger (reproduces the issue's failure, reads the file, tries heuristic edits)
`;

const FLAGS = {
  port: { type: 'string' },
  tps: { type: 'string' },
  seed: { type: 'string' },
  slots: { type: 'string' },
  dataset: { type: 'string' },
  tokenizer: { type: 'string' },
  tokenize: { type: 'string' },
  record: { type: 'string' },
  policy: { type: 'string' },
} as const;

/** A flag's whole number ≥ 0 (a port may be 0: any free one). */
function whole(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0)
    throw new UsageError(`--${flag} expects a whole number, got ${JSON.stringify(value)}`);
  return n;
}

/** Serve the stand-in engine until `io.signal` aborts (SIGINT/SIGTERM), then close it. */
export async function standInMain(argv: string[], io: CliIo): Promise<number> {
  if (wantsHelp(argv)) {
    io.stdout(USAGE);
    return EXIT.ok;
  }
  const { values } = parseFlags('vime-standin', argv, FLAGS, { maxPositionals: 0 });
  const config = checkConfig({
    seed: whole(values.seed, 'seed'),
    dataset: values.dataset,
    standInPolicy: oneOf(values.policy, '--policy', ['scripted', 'debugger'] as const),
  });
  const policy =
    config.standInPolicy === 'debugger'
      ? debuggerPolicy()
      : codingAgentPolicy(
          (await readTasks(config, { log: (line) => io.stderr(`${line}\n`) })).tasks.map((t) => ({
            problemStatement: t.prompt,
            goldPatch: t.goldPatch ?? '',
            workdir: t.workdir,
          })),
          { odds: config.odds, seed: config.seed },
        );
  const engine = await startStandInEngine({
    tokenizer: await loadTokenizer(
      values.tokenizer ? resolve(io.cwd, values.tokenizer) : bundledTokenizerDir(),
    ),
    policy: (request) => policy(request.prompt),
    service: { slots: whole(values.slots, 'slots') || 16, tokensPerSecond: whole(values.tps, 'tps') || 4000 },
    port: whole(values.port, 'port') ?? 0,
    tokenizeWire: oneOf(values.tokenize, '--tokenize', ['sglang', 'vllm', 'none'] as const),
  });
  const record = values.record === undefined ? undefined : resolve(io.cwd, values.record);
  // What the engine side received, as a test (or a user) reads it back: the sampling exactly as sent.
  if (record)
    engine.events.on('request', ({ rid, path, sampling }) =>
      appendFileSync(record, `${JSON.stringify({ rid, path, sampling })}\n`),
    );
  io.stdout(`stand-in engine (scripted policy, not a model) listening on ${engine.url}\n`);
  await new Promise<void>((resolve) => {
    if (io.signal?.aborted) resolve();
    io.signal?.addEventListener('abort', () => resolve(), { once: true });
  });
  await engine.close();
  return EXIT.ok;
}
