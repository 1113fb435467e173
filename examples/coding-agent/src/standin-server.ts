/**
 * Start a stand-in engine as its own process, serving the coding policy over SGLang's wire, so the loop
 * can be pointed at it with `--engine-url` exactly as at a real SGLang server. It prints its URL and
 * runs until SIGINT/SIGTERM. A stand-in, not a model.
 *
 *   node --import tsx --conditions=@vime/source examples/coding-agent/src/standin-server.ts [--port N] [--tps N] [--seed N]
 */
import { parseArgs } from 'node:util';
import { loadTokenizer } from '@vime/core';
import { startStandInEngine } from '@vime/core/standin';
import { ConfigSchema } from './config.js';
import { bundledTokenizerDir, loadTasks } from './loop.js';
import { codingAgentPolicy } from './policy.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string' },
    tps: { type: 'string' },
    seed: { type: 'string' },
    slots: { type: 'string' },
  },
});
const config = ConfigSchema.parse({ ...(values.seed ? { seed: Number(values.seed) } : {}) });
const tasks = await loadTasks(config);
const policy = codingAgentPolicy(
  tasks.map((t) => ({ problemStatement: t.prompt, goldPatch: t.goldPatch ?? '' })),
  { odds: config.odds, seed: config.seed },
);
const engine = await startStandInEngine({
  tokenizer: await loadTokenizer(bundledTokenizerDir()),
  policy: (request) => policy(request.prompt),
  service: { slots: Number(values.slots ?? 16), tokensPerSecond: Number(values.tps ?? 4000) },
  port: Number(values.port ?? 0),
});
console.log(`stand-in engine (scripted policy, not a model) listening on ${engine.url}`);
const stop = () => void engine.close().then(() => process.exit(0));
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
