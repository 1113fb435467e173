/**
 * The loop's resolved configuration: one flat object, validated once with zod, that every part of a run
 * reads. Where a value comes from (the embedded default, a config file, an env var or a flag) is the
 * business of `resolve.ts`; a config file's nested layout is `knobs.ts`.
 */
import { AGENT_KINDS, type AgentKind } from '@vime/harness';
import { z } from 'zod';

const AgentKindSchema = z.enum(AGENT_KINDS as [AgentKind, ...AgentKind[]]);

/** A sandbox's resource limits (`ResourceLimits` of @vime/sandbox); `null` lifts one limit. */
export const SandboxLimitsSchema = z.strictObject({
  memoryBytes: z.number().int().positive().nullable().optional(),
  pids: z.number().int().positive().nullable().optional(),
  cpuSeconds: z.number().int().positive().nullable().optional(),
  fileSizeBytes: z.number().int().positive().nullable().optional(),
  openFiles: z.number().int().positive().nullable().optional(),
  tmpBytes: z.number().int().positive().nullable().optional(),
  addressSpaceBytes: z.number().int().positive().nullable().optional(),
  cpus: z.number().positive().nullable().optional(),
});

/** The run config's schema (zod): each field's type, default and description; the JSON Schema is made from it. */
export const ConfigSchema = z.object({
  steps: z.number().int().positive().default(2).describe('Rollout steps to run.'),
  promptsPerStep: z.number().int().positive().default(4).describe('Prompts (tasks) per step.'),
  samplesPerPrompt: z
    .number()
    .int()
    .positive()
    .default(4)
    .describe('Rollouts per prompt: the GRPO group size.'),
  concurrency: z.number().int().positive().default(8).describe('Rollouts running at once.'),
  out: z.string().optional().describe('Output folder (default runs/<start time>).'),
  sandbox: z
    .enum(['bubblewrap', 'docker', 'local'])
    .default('bubblewrap')
    .describe('Sandbox provider; local runs commands on the host, unsafe for untrusted code.'),
  imageDir: z
    .string()
    .min(1)
    .optional()
    .describe(
      'Folder of image tarballs (docker save or OCI layout) bubblewrap looks in before the Docker engine.',
    ),
  sandboxLimits: SandboxLimitsSchema.optional().describe(
    "Resource limits of every sandbox (default: the provider's safe defaults).",
  ),
  engineUrls: z
    .array(z.url({ protocol: /^https?$/ }))
    .default([])
    .describe('SGLang/vLLM engine URLs; empty starts the stand-in engine(s).'),
  engineKind: z.enum(['sglang', 'vllm']).default('sglang').describe('The wire the engines speak.'),
  engineMaxLogprobs: z
    .number()
    .int()
    .positive()
    .default(20)
    .describe("vLLM engines' --max-logprobs: the largest top_logprobs they serve (vLLM's default 20)."),
  engineWaitMs: z
    .number()
    .int()
    .positive()
    .default(120_000)
    .describe('How long to wait for the engines to answer healthy before any rollout starts.'),
  engineHealthIntervalMs: z
    .number()
    .int()
    .positive()
    .default(30_000)
    .describe('Background engine health checks (they also run at every rollout end and failed request).'),
  engineDeadlineMs: z
    .number()
    .int()
    .positive()
    .default(60_000)
    .describe('How long a turn waits for a healthy engine before its rollout fails as infrastructure.'),
  onWeightUpdate: z
    .enum(['continue', 'restart'])
    .default('continue')
    .describe('A turn cut short by a weight update: resume it from its tokens, or regenerate it.'),
  routingReplayLayers: z
    .number()
    .int()
    .positive()
    .nullable()
    .default(null)
    .describe(
      "MoE routing replay (R3): the model's MoE layer count (slime's --num-layers). With routingReplayTopK, every turn asks its engine for the routed experts (a turn without them fails) and every row carries rollout_routed_experts (null: off).",
    ),
  routingReplayTopK: z
    .number()
    .int()
    .positive()
    .nullable()
    .default(null)
    .describe("MoE routing replay (R3): experts per token (slime's --moe-router-topk); null: off."),
  standInEngines: z
    .number()
    .int()
    .positive()
    .default(1)
    .describe('Stand-in engines to start when no engine URL is given.'),
  standInTokensPerSecond: z
    .number()
    .positive()
    .default(4000)
    .describe('Decode tokens/s of each stand-in engine.'),
  standInSlots: z
    .number()
    .int()
    .positive()
    .default(16)
    .describe('Concurrent requests of each stand-in engine.'),
  standInSpecAcceptLength: z
    .number()
    .min(1)
    .nullable()
    .default(null)
    .describe(
      "Simulated speculative decoding of each stand-in engine: its answers report SGLang's spec_verify_ct for this acceptance length (a scripted figure, nothing is drafted; null: off).",
    ),
  tokenizer: z
    .string()
    .optional()
    .describe(
      'Model folder with tokenizer.json and tokenizer_config.json (default: the bundled Qwen3 tokenizer, checked against the engine).',
    ),
  dataset: z
    .string()
    .optional()
    .describe(
      'SWE-smith rows (.jsonl or .parquet); default: the offline task set, published in that format.',
    ),
  repoFilter: z
    .array(z.string())
    .default([])
    .describe('Keep rows whose repo contains one of these (case-insensitive); empty keeps every repo.'),
  perRepo: z.number().int().nonnegative().default(0).describe('Rows kept per repo (0: all).'),
  invalidRows: z
    .enum(['stop', 'skip'])
    .default('stop')
    .describe('A malformed dataset row stops the run before it starts (stop), or is left out (skip).'),
  poolSuffix: z.string().default('').describe('Appended to pool names, so runs do not share warm pools.'),
  poolReplicas: z.number().int().nonnegative().default(4).describe('Warm sandboxes per repo pool.'),
  noPool: z.boolean().default(false).describe('No warm pools: every claim creates a sandbox on demand.'),
  validate: z
    .boolean()
    .default(true)
    .describe('Grade the unchanged repo and the gold patch of every row first; leave out rows that fail.'),
  resume: z.string().optional().describe('The run folder a resumed run continues.'),
  mode: z
    .enum(['sync', 'async'])
    .default('sync')
    .describe('sync: roll out a step, then hand off; async: keep rolling out while the consumer drains.'),
  shuffleRewardsSeed: z
    .number()
    .int()
    .nullable()
    .default(null)
    .describe(
      "The shuffled-reward control: each step's rewards permuted (seeded) across its rollouts before advantages; rows keep the earned one as metadata.true_reward (null: off).",
    ),
  taskDraw: z
    .enum(['cycle', 'fresh'])
    .default('cycle')
    .describe(
      "Which task each step's prompts get: cycle (dataset order, from the start again when it runs out) or fresh (a seeded draw without replacement: no task twice in the run; steps x prompts must fit the dataset).",
    ),
  taskDrawSeed: z.number().int().default(0).describe('Seed of the fresh task draw.'),
  maxStaleness: z
    .number()
    .int()
    .nonnegative()
    .nullable()
    .default(null)
    .describe('Largest weight-version lag a group may have when handed off; more drops it (null: no bound).'),
  agent: AgentKindSchema.default('mini-swe-agent').describe(
    'The agent of a row that names none (its agent field, metadata.agent) when no mix is given.',
  ),
  agentMix: z
    .partialRecord(AgentKindSchema, z.number().nonnegative())
    .optional()
    .describe('Weights of the agents given to rows that name none, e.g. {claude-code: 1, codex: 1}.'),
  agentTimeoutMs: z
    .number()
    .int()
    .positive()
    .default(600_000)
    .describe(
      'Wall-clock budget of a harness run (claude-code, codex, qwen-code, pi, opencode, gemini-cli); killed at its end.',
    ),
  harnessRegistry: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe('npm registry the pinned harness tarballs come from (a mirror; default the public one).'),
  maxTurns: z.number().int().nonnegative().default(12).describe('Model calls per rollout of mini-swe-agent.'),
  execTimeoutMs: z.number().int().positive().default(60_000).describe('Timeout of one agent command.'),
  gradeTimeoutMs: z
    .number()
    .int()
    .positive()
    .default(900_000)
    .describe("Test run timeout of one grade (the reference setup's 900 s)."),
  rolloutGuardMs: z
    .number()
    .int()
    .positive()
    .default(1_200_000)
    .describe('Whole-rollout deadline: agent, capture and grading together.'),
  siblingAttempts: z
    .number()
    .int()
    .min(1)
    .max(100)
    .default(1)
    .describe('Tries of a sibling that fails for infrastructure reasons before its group is dropped.'),
  onSuspicious: z
    .enum(['zero', 'flag'])
    .default('zero')
    .describe('A detected hack scores 0 (zero), or keeps its verdict and is only counted (flag).'),
  maxContextTokens: z
    .number()
    .int()
    .positive()
    .default(32_768)
    .describe("A rollout's token budget: prompt and every turn's output together."),
  maxTokensPerTurn: z.number().int().positive().default(1024).describe('Most tokens one turn generates.'),
  temperature: z.number().nonnegative().default(1).describe('Sampling temperature.'),
  topP: z.number().positive().max(1).default(1).describe('Nucleus sampling: the top-p mass kept.'),
  topK: z
    .number()
    .int()
    .min(-1)
    .optional()
    .describe("Top-k sampling (-1: off); absent, the engine's default."),
  topLogprobs: z
    .number()
    .int()
    .positive()
    .optional()
    .describe(
      'Capture the top-k log probs of every sampled token (score centering), k = this; absent, none.',
    ),
  stop: z.array(z.string().min(1)).default([]).describe('Stop strings: a turn ends where one is generated.'),
  odds: z
    .object({ gold: z.number(), wrong: z.number(), malformed: z.number() })
    .default({ gold: 0.5, wrong: 0.35, malformed: 0.15 })
    .describe("Odds of the stand-in policy's outcomes."),
  seed: z.number().int().default(7).describe('Seed of the stand-in policy.'),
  standInPolicy: z
    .enum(['scripted', 'debugger'])
    .default('scripted')
    .describe(
      "The stand-in's script: scripted (explores, then the gold fix, a wrong fix or malformed output by the odds) or debugger (reproduces the issue's failure, reads the file, tries heuristic edits; never sees a gold patch).",
    ),
  quiet: z.boolean().default(false).describe('No progress bars or progress lines.'),
  tensorboard: z.boolean().default(true).describe('Write TensorBoard event files under <out>/tensorboard.'),
  wandbProject: z
    .string()
    .min(1)
    .optional()
    .describe('Also write a Weights & Biases offline run (<out>/wandb) for this project.'),
  progressEverySeconds: z
    .number()
    .positive()
    .default(10)
    .describe('Seconds between progress lines when output is not a terminal.'),
});
/** The loop's run config, every default filled in. */
export type Config = z.output<typeof ConfigSchema>;
/** The name of one setting of `Config`. */
export type ConfigField = keyof Config;
