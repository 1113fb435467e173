/**
 * The loop's configuration: embedded defaults, then the env vars a Job Group passes (the reference
 * setup's names), then CLI flags; validated once with zod. Errors name the flag or variable, the value
 * and what is accepted.
 */
import { ConfigError } from '@vime/core';
import { parseDuration, parseFlags, wantsHelp } from '@vime/core/utils';
import { AGENT_KINDS, type AgentKind } from '@vime/harness';
import { z } from 'zod';

/** Schema of the loop's run config (every setting has a flag). */
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
  /** How long to wait for the engines to answer healthy before any rollout starts. */
  engineWaitMs: z.number().int().positive().default(120_000),
  /** Background health checks of the engines (they also run at every rollout completion and failed request). */
  engineHealthIntervalMs: z.number().int().positive().default(30_000),
  /** How long a turn waits for a healthy engine before its rollout fails as an infrastructure failure. */
  engineDeadlineMs: z.number().int().positive().default(60_000),
  /** A turn cut short by a weight update: resume it from its tokens, or regenerate it on the new weights. */
  onWeightUpdate: z.enum(['continue', 'restart']).default('continue'),
  /** Stand-in engines to start when no engine URL is given. */
  standInEngines: z.number().int().positive().default(1),
  /** Stand-in engine service model: decode tokens/s per engine and concurrent slots. */
  standInTokensPerSecond: z.number().positive().default(4000),
  standInSlots: z.number().int().positive().default(16),
  /** Model folder with tokenizer.json + tokenizer_config.json; default: the bundled Qwen3 tokenizer. */
  tokenizer: z.string().optional(),
  /** SWE-smith JSONL/parquet; default: the offline task set, published in the same format. */
  dataset: z.string().optional(),
  /** Case-insensitive repo substrings to keep; empty keeps every repo. */
  repoFilter: z.array(z.string()).default([]),
  /** Rows kept per repo (0: all; `SWESMITH_PER_REPO`). */
  perRepo: z.number().int().nonnegative().default(0),
  /** Appended to pool names (`SWESMITH_POOL_SUFFIX`), so runs do not share pools. */
  poolSuffix: z.string().default(''),
  /** Warm sandboxes per repo pool (`SANDBOX_POOL_REPLICAS`). */
  poolReplicas: z.number().int().nonnegative().default(4),
  /** No warm pools: every claim creates on demand (`SANDBOX_NO_POOL=1`). */
  noPool: z.boolean().default(false),
  /** Grade the unchanged repo and the gold patch of every row first, and leave out rows that fail. */
  validate: z.boolean().default(true),
  resume: z.string().optional(),
  mode: z.enum(['sync', 'async']).default('sync'),
  /** The agent of a sample whose row sets no `agent` (`metadata.agent`). */
  agent: z.enum(AGENT_KINDS as [AgentKind, ...AgentKind[]]).default('mini-swe-agent'),
  /** Wall-clock budget of a harness run (`claude-code`, `codex`); the harness is killed at its end. */
  agentTimeoutMs: z.number().int().positive().default(600_000),
  /** npm registry the pinned harness tarballs come from (a mirror; default the public registry). */
  harnessRegistry: z.url().optional(),
  /** Agent budget: model calls per rollout (`AGENT_MAX_TURNS`). */
  maxTurns: z.number().int().nonnegative().default(12),
  execTimeoutMs: z.number().int().positive().default(60_000),
  /** Test run timeout of one grade (`AGENT_EVAL_TIMEOUT_SEC`; the reference setup's 900 s). */
  gradeTimeoutMs: z.number().int().positive().default(900_000),
  /** Whole-rollout deadline: agent, capture and grading together. */
  rolloutGuardMs: z.number().int().positive().default(1_200_000),
  /**
   * Attempts per sibling that fails for infrastructure reasons (the first included) before its prompt
   * group is dropped (counted by reason). Default 1: the first such failure drops the group.
   */
  siblingAttempts: z.number().int().min(1).max(100).default(1),
  /** What a detected hack does: reward 0 (`zero`), or keep the verdict and only count it (`flag`). */
  onSuspicious: z.enum(['zero', 'flag']).default('zero'),
  maxContextTokens: z.number().int().positive().default(32_768),
  maxTokensPerTurn: z.number().int().positive().default(1024),
  temperature: z.number().positive().default(1),
  topP: z.number().positive().max(1).default(1),
  /** Odds of the stand-in policy's outcomes. */
  odds: z
    .object({ gold: z.number(), wrong: z.number(), malformed: z.number() })
    .default({ gold: 0.5, wrong: 0.35, malformed: 0.15 }),
  seed: z.number().int().default(7),
  quiet: z.boolean().default(false),
  /** Also write a Weights & Biases offline run (`<out>/wandb/offline-run-…`) for this project. */
  wandbProject: z.string().min(1).optional(),
  /** Seconds between progress lines when output is not a terminal. */
  progressEverySeconds: z.number().positive().default(10),
});
/** The loop's run config. */
export type Config = z.output<typeof ConfigSchema>;

/** The help of `vime-loop`. */
export const usage = `Usage: vime-loop [flags]

Runs the coding-agent RL loop: per step, rollouts in sandboxes against an inference engine, each graded in
a fresh sandbox with hidden tests, GRPO advantages (slime preset), pass@k and timing metrics, the batch
appended to a durable queue and written to <out>/steps/<step>.msgpack, and a report (<out>/report.json,
<out>/report.html). With no flags it runs on embedded defaults: the offline SWE-smith-format task set
(published as a dataset file and loaded exactly like --dataset), bubblewrap sandboxes and a stand-in engine
(a scripted policy behind SGLang's wire, not a model).

Flags (environment variable in brackets; a flag wins over its variable):
  --steps N                rollout steps (default 2)
  --prompts N              prompts per step (default 4)
  --samples N              rollouts per prompt, the GRPO group size (default 4)
  --concurrency N          rollouts at once (default 8) [VIME_ROLLOUT_CONCURRENCY]
  --out DIR                output folder (default runs/<timestamp>)
  --sandbox KIND           bubblewrap | docker | local (default bubblewrap; local is unsafe for untrusted code)
                           [VIME_SANDBOX]
  --engine-url URL         an SGLang (or vLLM with --engine-kind vllm) server; repeat for several [VIME_ENGINE_URLS]
  --engine-kind KIND       sglang | vllm (default sglang)
  --engine-wait DURATION   how long to wait for the engines to be healthy (default 120s)
  --engines N              stand-in engines to start when no --engine-url is given (default 1)
  --engine-tps N           stand-in decode tokens/s per engine (default 4000)
  --tokenizer DIR          model folder with tokenizer.json and tokenizer_config.json
  --dataset FILE           SWE-smith rows (.jsonl or .parquet) instead of the offline task set [SWESMITH_DATASET]
  --repo SUBSTRING         keep rows whose repo contains it (repeatable; default: every repo)
                           [SWESMITH_REPOS, space-separated]
  --per-repo N             rows kept per repo (default all) [SWESMITH_PER_REPO]
  --pool-replicas N        warm sandboxes per repo pool (default 4) [SANDBOX_POOL_REPLICAS]
  --no-pool                no warm pools: every claim creates a sandbox on demand [SANDBOX_NO_POOL=1]
  --pool-suffix TEXT       appended to pool names [SWESMITH_POOL_SUFFIX]
  --no-validate            skip the baseline check of the dataset (unchanged fails, gold resolves)
  --agent KIND             mini-swe-agent | claude-code | codex: the agent of a row that names none in
                           its agent field (metadata.agent) (default mini-swe-agent)
  --agent-timeout DURATION wall-clock budget of a claude-code or codex run (default 10m)
  --harness-registry URL   npm registry (a mirror) the pinned harness tarballs are fetched from, once
                           (default https://registry.npmjs.org; checked against the pinned sha512)
  --max-turns N            model calls per rollout of mini-swe-agent (default 12) [AGENT_MAX_TURNS]
  --eval-timeout DURATION  test run timeout of one grade (default 900s) [AGENT_EVAL_TIMEOUT_SEC]
  --rollout-deadline DURATION  whole-rollout deadline, grading included (default 20m)
  --hacks zero|flag        a detected hack scores 0 (default), or is only counted
  --engine-health-interval DURATION  background engine health checks (default 30s; checks also run
                           at every rollout completion and failed request)
  --engine-deadline DURATION  how long a turn waits for a healthy engine before its rollout fails as
                           an infrastructure failure (default 60s)
  --on-weight-update continue|restart  a turn cut short by a weight update resumes from its tokens
                           (default) or is regenerated on the new weights
  --resume DIR             continue a killed run from its queue without redoing completed rollouts
  --sibling-attempts N     tries of a sibling that fails for infrastructure reasons (the first
                           included) before its prompt group is dropped, counted (default 1)
  --mode sync|async        sync: roll out a step, then hand off; async: keep rolling out while the
                           consumer drains the queue (default sync)
  --seed N                 seed of the stand-in policy (default 7)
  --quiet                  no progress bars or progress lines
  --wandb-project NAME     also write a Weights & Biases offline run under <out>/wandb for project NAME
                           (upload it with \`wandb sync <out>/wandb/offline-run-*\`) [WANDB_PROJECT]
  -h, --help               this text
`;

const FLAGS = {
  steps: { type: 'string' },
  prompts: { type: 'string' },
  samples: { type: 'string' },
  concurrency: { type: 'string' },
  out: { type: 'string' },
  sandbox: { type: 'string' },
  'engine-url': { type: 'string', multiple: true },
  'engine-kind': { type: 'string' },
  'engine-wait': { type: 'string' },
  engines: { type: 'string' },
  'engine-tps': { type: 'string' },
  'engine-health-interval': { type: 'string' },
  'engine-deadline': { type: 'string' },
  'on-weight-update': { type: 'string' },
  tokenizer: { type: 'string' },
  dataset: { type: 'string' },
  repo: { type: 'string', multiple: true },
  'per-repo': { type: 'string' },
  'pool-replicas': { type: 'string' },
  'no-pool': { type: 'boolean' },
  'pool-suffix': { type: 'string' },
  'no-validate': { type: 'boolean' },
  agent: { type: 'string' },
  'agent-timeout': { type: 'string' },
  'harness-registry': { type: 'string' },
  'max-turns': { type: 'string' },
  'eval-timeout': { type: 'string' },
  'rollout-deadline': { type: 'string' },
  'sibling-attempts': { type: 'string' },
  hacks: { type: 'string' },
  resume: { type: 'string' },
  mode: { type: 'string' },
  seed: { type: 'string' },
  quiet: { type: 'boolean' },
  'wandb-project': { type: 'string' },
} as const;

/** Config field → the flag (or variable) a user sets it with, for messages. */
const NAMES: Record<string, string> = {
  steps: '--steps',
  promptsPerStep: '--prompts',
  samplesPerPrompt: '--samples',
  concurrency: '--concurrency / VIME_ROLLOUT_CONCURRENCY',
  sandbox: '--sandbox / VIME_SANDBOX',
  engineUrls: '--engine-url',
  engineKind: '--engine-kind',
  engineWaitMs: '--engine-wait',
  standInEngines: '--engines',
  standInTokensPerSecond: '--engine-tps',
  engineHealthIntervalMs: '--engine-health-interval',
  engineDeadlineMs: '--engine-deadline',
  onWeightUpdate: '--on-weight-update',
  perRepo: '--per-repo / SWESMITH_PER_REPO',
  poolReplicas: '--pool-replicas / SANDBOX_POOL_REPLICAS',
  agent: '--agent',
  agentTimeoutMs: '--agent-timeout',
  harnessRegistry: '--harness-registry',
  maxTurns: '--max-turns / AGENT_MAX_TURNS',
  gradeTimeoutMs: '--eval-timeout / AGENT_EVAL_TIMEOUT_SEC',
  rolloutGuardMs: '--rollout-deadline',
  siblingAttempts: '--sibling-attempts',
  onSuspicious: '--hacks',
  mode: '--mode',
  seed: '--seed',
  wandbProject: '--wandb-project',
};

const whole = (value: string | undefined, name: string): number | undefined => {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new ConfigError(`${name}: ${JSON.stringify(value)} is not a number`);
  return n;
};
const ms = (value: string | undefined, name: string) =>
  value === undefined || value === '' ? undefined : parseDuration(value, name);

/** The settings the reference Job Group passes as env vars (and `VIME_ENGINE_URLS`). */
export function configFromEnv(env: Record<string, string | undefined>): Record<string, unknown> {
  const seconds = whole(env.AGENT_EVAL_TIMEOUT_SEC, 'AGENT_EVAL_TIMEOUT_SEC');
  const noPool = env.SANDBOX_NO_POOL;
  if (noPool !== undefined && noPool !== '' && noPool !== '0' && noPool !== '1') {
    throw new ConfigError(`SANDBOX_NO_POOL: ${JSON.stringify(noPool)} is not 0 or 1`);
  }
  const raw = {
    engineUrls: env.VIME_ENGINE_URLS?.split(/[\s,]+/).filter(Boolean),
    maxTurns: whole(env.AGENT_MAX_TURNS, 'AGENT_MAX_TURNS'),
    concurrency: whole(env.VIME_ROLLOUT_CONCURRENCY, 'VIME_ROLLOUT_CONCURRENCY'),
    gradeTimeoutMs: seconds === undefined ? undefined : seconds * 1000,
    poolReplicas: whole(env.SANDBOX_POOL_REPLICAS, 'SANDBOX_POOL_REPLICAS'),
    noPool: noPool === undefined || noPool === '' ? undefined : noPool === '1',
    perRepo: whole(env.SWESMITH_PER_REPO, 'SWESMITH_PER_REPO'),
    poolSuffix: env.SWESMITH_POOL_SUFFIX || undefined,
    dataset: env.SWESMITH_DATASET || undefined,
    repoFilter: env.SWESMITH_REPOS?.split(/\s+/).filter(Boolean),
    sandbox: env.VIME_SANDBOX || undefined,
    wandbProject: env.WANDB_PROJECT || undefined,
  };
  return Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined));
}

/** Validate a raw config; zod's issues become one `ConfigError` naming each flag and value. */
export function checkConfig(raw: Record<string, unknown>): Config {
  const parsed = ConfigSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const lines = parsed.error.issues.map((issue) => {
    const field = String(issue.path[0] ?? '');
    const value = raw[field];
    return `${NAMES[field] ?? field}: ${issue.message}${value === undefined ? '' : ` (got ${JSON.stringify(value)})`}`;
  });
  throw new ConfigError(lines.join('\n'));
}

/** Flags and env vars into a config (`command` names the bin in messages), or 'help' for `--help`. */
export function parseConfig(
  argv: string[],
  env: Record<string, string | undefined> = {},
  command = 'vime-loop',
): Config | 'help' {
  const args = argv.filter((a) => a !== '--');
  if (wantsHelp(args)) return 'help';
  const { values } = parseFlags(command, args, FLAGS, { maxPositionals: 0 });
  const flags = {
    steps: whole(values.steps, '--steps'),
    promptsPerStep: whole(values.prompts, '--prompts'),
    samplesPerPrompt: whole(values.samples, '--samples'),
    concurrency: whole(values.concurrency, '--concurrency'),
    out: values.out ?? values.resume,
    sandbox: values.sandbox,
    engineUrls: values['engine-url'],
    engineKind: values['engine-kind'],
    engineWaitMs: ms(values['engine-wait'], '--engine-wait'),
    standInEngines: whole(values.engines, '--engines'),
    standInTokensPerSecond: whole(values['engine-tps'], '--engine-tps'),
    engineHealthIntervalMs: ms(values['engine-health-interval'], '--engine-health-interval'),
    engineDeadlineMs: ms(values['engine-deadline'], '--engine-deadline'),
    onWeightUpdate: values['on-weight-update'],
    tokenizer: values.tokenizer,
    dataset: values.dataset,
    repoFilter: values.repo,
    perRepo: whole(values['per-repo'], '--per-repo'),
    poolReplicas: whole(values['pool-replicas'], '--pool-replicas'),
    noPool: values['no-pool'],
    poolSuffix: values['pool-suffix'],
    validate: values['no-validate'] ? false : undefined,
    agent: values.agent,
    agentTimeoutMs: ms(values['agent-timeout'], '--agent-timeout'),
    harnessRegistry: values['harness-registry'],
    maxTurns: whole(values['max-turns'], '--max-turns'),
    gradeTimeoutMs: ms(values['eval-timeout'], '--eval-timeout'),
    rolloutGuardMs: ms(values['rollout-deadline'], '--rollout-deadline'),
    siblingAttempts: whole(values['sibling-attempts'], '--sibling-attempts'),
    onSuspicious: values.hacks,
    resume: values.resume,
    mode: values.mode,
    seed: whole(values.seed, '--seed'),
    quiet: values.quiet,
    wandbProject: values['wandb-project'],
  };
  const defined = Object.fromEntries(Object.entries(flags).filter(([, v]) => v !== undefined));
  return checkConfig({ ...configFromEnv(env), ...defined });
}
