/**
 * Start a stand-in engine as its own process, serving the coding policy over SGLang's wire, so the loop
 * can be pointed at it with `--engine-url` exactly as at a real SGLang server. It prints its URL and
 * runs until SIGINT/SIGTERM. A stand-in, not a model.
 *
 *   vime-standin [flags]
 */
import { parseArgs } from 'node:util';
import { ConfigError } from '@vime/core';
import { loadTokenizer } from '@vime/core/engine';
import { startStandInEngine } from '@vime/core/standin';
import { runEntry } from '../cli/entry.js';
import { checkConfig } from '../config.js';
import { bundledTokenizerDir } from '../defaults.js';
import { readTasks } from '../tasks.js';
import { codingAgentPolicy } from './policy.js';

const USAGE = `Usage: vime-standin [--port N] [--tps N] [--slots N] [--seed N] [--dataset FILE]

A stand-in engine (a scripted coding policy behind SGLang's wire, not a model) in its own process.
  --port N        port (default: any free one)
  --tps N         decode tokens/s (default 4000)
  --slots N       concurrent requests (default 16)
  --seed N        seed of the scripted policy (default 7)
  --dataset FILE  the tasks whose gold patches the policy knows (default: the offline task set)
`;

await runEntry('vime-standin', async () => {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      options: {
        port: { type: 'string' },
        tps: { type: 'string' },
        seed: { type: 'string' },
        slots: { type: 'string' },
        dataset: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (cause) {
    throw new ConfigError(`${(cause as Error).message}\n\n${USAGE}`);
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const int = (flag: string) => {
    const v = values[flag] as string | undefined;
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0)
      throw new ConfigError(`--${flag}: expected a whole number, got ${JSON.stringify(v)}`);
    return n;
  };
  const config = checkConfig({
    ...(values.seed !== undefined ? { seed: int('seed') } : {}),
    ...(values.dataset !== undefined ? { dataset: values.dataset } : {}),
  });
  const { tasks } = await readTasks(config, { log: (line) => console.error(line) });
  const policy = codingAgentPolicy(
    tasks.map((t) => ({ problemStatement: t.prompt, goldPatch: t.goldPatch ?? '', workdir: t.workdir })),
    { odds: config.odds, seed: config.seed },
  );
  const engine = await startStandInEngine({
    tokenizer: await loadTokenizer(bundledTokenizerDir()),
    policy: (request) => policy(request.prompt),
    service: { slots: int('slots') || 16, tokensPerSecond: int('tps') || 4000 },
    port: int('port') ?? 0,
  });
  console.log(`stand-in engine (scripted policy, not a model) listening on ${engine.url}`);
  await new Promise<void>((resolve) => {
    const stop = () => void engine.close().then(resolve);
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  return 0;
});
