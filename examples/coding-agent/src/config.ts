/**
 * The example's configuration: embedded defaults, overridden by CLI flags, validated once with zod.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';

export const ConfigSchema = z.object({
  /** Rollout steps to run. */
  steps: z.number().int().positive().default(2),
  /** Prompts (tasks) per step. */
  promptsPerStep: z.number().int().positive().default(4),
  /** Rollouts per prompt (the GRPO group size). */
  samplesPerPrompt: z.number().int().positive().default(4),
  /** Rollouts running at once. */
  concurrency: z.number().int().positive().default(8),
  /** Output folder. */
  out: z.string().optional(),
  sandbox: z.enum(['bubblewrap', 'docker', 'local']).default('bubblewrap'),
  /** SGLang/vLLM engine URLs; empty = start the stand-in engine(s). */
  engineUrls: z.array(z.url()).default([]),
  engineKind: z.enum(['sglang', 'vllm']).default('sglang'),
  /** Stand-in engines to start when no engine URL is given. */
  standInEngines: z.number().int().positive().default(1),
  /** Stand-in engine service model: decode tokens/s per engine and concurrent slots. */
  standInTokensPerSecond: z.number().positive().default(4000),
  standInSlots: z.number().int().positive().default(16),
  /** Model folder with tokenizer.json + tokenizer_config.json; default: the bundled Qwen3 tokenizer. */
  tokenizer: z.string().optional(),
  /** SWE-smith JSONL/parquet; default: the offline task set built from source. */
  dataset: z.string().optional(),
  /** Case-insensitive repo substrings to keep (with --dataset). */
  repoFilter: z.array(z.string()).default([]),
  resume: z.string().optional(),
  mode: z.enum(['sync', 'async']).default('sync'),
  /** Agent limits. */
  stepLimit: z.number().int().nonnegative().default(12),
  execTimeoutMs: z.number().int().positive().default(60_000),
  /** Whole-rollout wall-clock guard. */
  rolloutGuardMs: z.number().int().positive().default(300_000),
  maxContextTokens: z.number().int().positive().default(32_768),
  maxTokensPerTurn: z.number().int().positive().default(1024),
  temperature: z.number().positive().default(1),
  topP: z.number().positive().max(1).default(1),
  /** Odds of the stand-in policy's outcomes. */
  odds: z
    .object({ gold: z.number(), wrong: z.number(), malformed: z.number() })
    .default({ gold: 0.5, wrong: 0.35, malformed: 0.15 }),
  seed: z.number().int().default(7),
  /** Warm sandboxes kept per pool. */
  warmSandboxes: z.number().int().nonnegative().default(4),
  quiet: z.boolean().default(false),
});
export type Config = z.output<typeof ConfigSchema>;

export const usage = `Usage: pnpm coding-agent -- [flags]

Runs the coding-agent RL loop: per step, rollouts in sandboxes against an inference engine, grading with
hidden tests, GRPO advantages (slime preset), pass@k and timing metrics, the batch appended to a durable
queue and written to <out>/steps/<step>.msgpack, and a report (<out>/report.json, <out>/report.html).
With no flags it runs on embedded defaults: the offline SWE-smith-format task set, bubblewrap sandboxes
and a stand-in engine (a scripted policy behind SGLang's wire, not a model).

Flags:
  --steps N                rollout steps (default 2)
  --prompts N              prompts per step (default 4)
  --samples N              rollouts per prompt, the GRPO group size (default 4)
  --concurrency N          rollouts at once (default 8)
  --out DIR                output folder (default runs/<timestamp>)
  --sandbox KIND           bubblewrap | docker | local (default bubblewrap; local is unsafe for untrusted code)
  --engine-url URL         an SGLang (or vLLM with --engine-kind vllm) server; repeat for several
  --engine-kind KIND       sglang | vllm (default sglang)
  --engines N              stand-in engines to start when no --engine-url is given (default 1)
  --engine-tps N           stand-in decode tokens/s per engine (default 4000)
  --tokenizer DIR          model folder with tokenizer.json and tokenizer_config.json
  --dataset FILE           SWE-smith rows (.jsonl or .parquet) instead of the offline task set
  --repo SUBSTRING         keep rows whose repo contains it (repeatable; with --dataset)
  --resume DIR             continue a killed run from its queue without redoing completed rollouts
  --mode sync|async        sync: roll out a step, then hand off; async: keep rolling out while the
                           consumer drains the queue (default sync)
  --step-limit N           model calls per rollout (default 12)
  --seed N                 seed of the stand-in policy (default 7)
  --quiet                  no progress bars
  -h, --help               this text
`;

export function parseConfig(argv: string[]): Config | 'help' {
  const { values } = parseArgs({
    args: argv.filter((a) => a !== '--'),
    options: {
      steps: { type: 'string' },
      prompts: { type: 'string' },
      samples: { type: 'string' },
      concurrency: { type: 'string' },
      out: { type: 'string' },
      sandbox: { type: 'string' },
      'engine-url': { type: 'string', multiple: true },
      'engine-kind': { type: 'string' },
      engines: { type: 'string' },
      'engine-tps': { type: 'string' },
      tokenizer: { type: 'string' },
      dataset: { type: 'string' },
      repo: { type: 'string', multiple: true },
      resume: { type: 'string' },
      mode: { type: 'string' },
      'step-limit': { type: 'string' },
      seed: { type: 'string' },
      quiet: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const num = (v: string | undefined) => (v === undefined ? undefined : Number(v));
  const raw = {
    steps: num(values.steps),
    promptsPerStep: num(values.prompts),
    samplesPerPrompt: num(values.samples),
    concurrency: num(values.concurrency),
    out: values.out ?? values.resume,
    sandbox: values.sandbox,
    engineUrls: values['engine-url'],
    engineKind: values['engine-kind'],
    standInEngines: num(values.engines),
    standInTokensPerSecond: num(values['engine-tps']),
    tokenizer: values.tokenizer,
    dataset: values.dataset,
    repoFilter: values.repo,
    resume: values.resume,
    mode: values.mode,
    stepLimit: num(values['step-limit']),
    seed: num(values.seed),
    quiet: values.quiet,
  };
  const defined = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined));
  return ConfigSchema.parse(defined);
}
