/**
 * The loop's flags and the env vars a Job Group passes (the reference setup's names), each turned into
 * the `Config` fields it sets. Values are only parsed here; `resolve.ts` validates and layers them.
 */
import { ConfigError } from '@vime/core';
import { parseDuration, parseFlags } from '@vime/core/utils';
import type { ConfigField } from './schema.js';

/** The help `vime-loop --help` prints: every flag, its default and its environment variable. */
export const usage = `Usage: vime-loop [--config FILE] [flags]

Runs the coding-agent RL loop: per step, rollouts in sandboxes against an inference engine, each graded in
a fresh sandbox with hidden tests, GRPO advantages (slime preset), pass@k and timing metrics, the batch
appended to a durable queue and written to <out>/steps/<step>.msgpack, and a report (<out>/report.json,
<out>/report.html). With no flags it runs on embedded defaults: the offline SWE-smith-format task set
(published as a dataset file and loaded exactly like --dataset), bubblewrap sandboxes and a stand-in engine
(a scripted policy behind SGLang's wire, or vLLM's with --engine-kind vllm, not a model).

Settings: embedded defaults < --config FILE < environment variables < flags. The resolved config, with
where each value came from, is written to <out>/run-config.yaml and shown at the top of the report.

Flags (environment variable in brackets; a flag wins over its variable, a variable over the file):
  --config FILE            a run config, YAML or JSON, with every knob below and more (its schema:
                           run-config.schema.json of @vime/loop; examples: examples/coding-agent/configs/)
  --steps N                rollout steps (default 2)
  --prompts N              prompts per step (default 4)
  --samples N              rollouts per prompt, the GRPO group size (default 4)
  --concurrency N          rollouts at once (default 8) [VIME_ROLLOUT_CONCURRENCY]
  --out DIR                output folder (default runs/<timestamp>)
  --sandbox KIND           bubblewrap | docker | local (default bubblewrap; local is unsafe for untrusted code)
                           [VIME_SANDBOX]
  --image-dir DIR          image tarballs (docker save or OCI layout) that bubblewrap turns into rootfs
                           folders, looked in before the Docker engine (DOCKER_HOST) [VIME_IMAGE_DIR]
  --engine-url URL         an SGLang (or vLLM with --engine-kind vllm) server; repeat for several [VIME_ENGINE_URLS]
  --engine-kind KIND       sglang | vllm (default sglang)
  --engine-max-logprobs N  the vLLM engines' --max-logprobs (default 20, vLLM's)
  --engine-wait DURATION   how long to wait for the engines to be healthy (default 120s)
  --engines N              stand-in engines to start when no --engine-url is given (default 1)
  --engine-tps N           stand-in decode tokens/s per engine (default 4000)
  --tokenizer DIR          model folder with tokenizer.json and tokenizer_config.json; checked against
                           every --engine-url before the first rollout (required with a real engine
                           unless the engine's tokenizer is found to be the bundled Qwen3 one)
  --temperature X          sampling temperature (default 1)
  --top-p X                nucleus sampling mass (default 1)
  --top-k N                top-k sampling (-1: off; default: the engine's)
  --top-logprobs K         capture the top-K log probs of every sampled token, for score centering
                           (default: none; vLLM: at most --engine-max-logprobs)
  --max-tokens N           most tokens one turn generates (default 1024)
  --max-context N          a rollout's token budget, prompt and turns together (default 32768)
  --stop TEXT              a stop string (repeatable)
  --dataset FILE           SWE-smith rows (.jsonl or .parquet) instead of the offline task set [SWESMITH_DATASET]
  --repo SUBSTRING         keep rows whose repo contains it (repeatable; default: every repo)
                           [SWESMITH_REPOS, space-separated]
  --per-repo N             rows kept per repo (default all) [SWESMITH_PER_REPO]
  --invalid-rows stop|skip a malformed dataset row stops the run before it starts (default), or is
                           left out
  --pool-replicas N        warm sandboxes per repo pool (default 4) [SANDBOX_POOL_REPLICAS]
  --no-pool                no warm pools: every claim creates a sandbox on demand [SANDBOX_NO_POOL=1]
  --pool-suffix TEXT       appended to pool names [SWESMITH_POOL_SUFFIX]
  --no-validate            skip the baseline check of the dataset (unchanged fails, gold resolves)
  --agent KIND             mini-swe-agent | claude-code | codex | qwen-code | pi | opencode |
                           gemini-cli: the agent of a row that names none in its agent field
                           (metadata.agent) (default mini-swe-agent)
  --agent-mix K=W,...      agents of rows that name none, by weight (e.g. claude-code=1,codex=1)
  --agent-timeout DURATION wall-clock budget of a CLI harness run (default 10m)
  --exec-timeout DURATION  timeout of one agent command (default 60s)
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
  --routing-replay-layers N, --routing-replay-top-k K  MoE routing replay (R3): the model's MoE
                           layers and experts per token; every row carries rollout_routed_experts
                           (default off)
  --resume DIR             continue a killed run from its queue without redoing completed rollouts,
                           with the config it started with (a flag that would change it is refused)
  --sibling-attempts N     tries of a sibling that fails for infrastructure reasons (the first
                           included) before its prompt group is dropped, counted (default 1)
  --max-staleness N        largest weight-version lag a group may have when handed off (default none)
  --mode sync|async        sync: roll out a step, then hand off; async: keep rolling out while the
                           consumer drains the queue (default sync)
  --seed N                 seed of the stand-in policy (default 7)
  --shuffle-rewards SEED   the shuffled-reward control: permute each step's rewards across its rollouts
                           (seeded) before advantages; pass@k still counts what rollouts earned (default off)
  --task-draw cycle|fresh  which task each prompt gets: dataset order, cycling (cycle), or a seeded draw
                           without replacement, no task twice in the run (fresh; steps x prompts must fit
                           the dataset); each step's tasks in <out>/draws/<step>.json (default cycle)
  --task-draw-seed N       seed of the fresh draw (default 0)
  --policy NAME            the stand-in's script: scripted (gold fix, wrong fix or malformed output by
                           the odds) or debugger (reproduces, reads, tries heuristic edits; default scripted)
  --quiet                  no progress bars or progress lines
  --wandb-project NAME     also write a Weights & Biases offline run under <out>/wandb for project NAME
                           (upload it with \`wandb sync <out>/wandb/offline-run-*\`) [WANDB_PROJECT]
  -h, --help               this text
`;

export const FLAGS = {
  config: { type: 'string' },
  steps: { type: 'string' },
  prompts: { type: 'string' },
  samples: { type: 'string' },
  concurrency: { type: 'string' },
  out: { type: 'string' },
  sandbox: { type: 'string' },
  'image-dir': { type: 'string' },
  'engine-url': { type: 'string', multiple: true },
  'engine-kind': { type: 'string' },
  'engine-wait': { type: 'string' },
  engines: { type: 'string' },
  'engine-tps': { type: 'string' },
  'engine-health-interval': { type: 'string' },
  'engine-deadline': { type: 'string' },
  'on-weight-update': { type: 'string' },
  'routing-replay-layers': { type: 'string' },
  'routing-replay-top-k': { type: 'string' },
  tokenizer: { type: 'string' },
  temperature: { type: 'string' },
  'top-p': { type: 'string' },
  'top-k': { type: 'string' },
  'top-logprobs': { type: 'string' },
  'engine-max-logprobs': { type: 'string' },
  'max-tokens': { type: 'string' },
  'max-context': { type: 'string' },
  stop: { type: 'string', multiple: true },
  dataset: { type: 'string' },
  repo: { type: 'string', multiple: true },
  'per-repo': { type: 'string' },
  'invalid-rows': { type: 'string' },
  'pool-replicas': { type: 'string' },
  'no-pool': { type: 'boolean' },
  'pool-suffix': { type: 'string' },
  'no-validate': { type: 'boolean' },
  agent: { type: 'string' },
  'agent-mix': { type: 'string' },
  'agent-timeout': { type: 'string' },
  'exec-timeout': { type: 'string' },
  'harness-registry': { type: 'string' },
  'max-turns': { type: 'string' },
  'eval-timeout': { type: 'string' },
  'rollout-deadline': { type: 'string' },
  'sibling-attempts': { type: 'string' },
  'max-staleness': { type: 'string' },
  hacks: { type: 'string' },
  resume: { type: 'string' },
  mode: { type: 'string' },
  seed: { type: 'string' },
  policy: { type: 'string' },
  'shuffle-rewards': { type: 'string' },
  'task-draw': { type: 'string' },
  'task-draw-seed': { type: 'string' },
  quiet: { type: 'boolean' },
  'wandb-project': { type: 'string' },
} as const;

type Values = Partial<Record<ConfigField, unknown>>;

const number = (value: string | undefined, name: string): number | undefined => {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new ConfigError(`${name}: ${JSON.stringify(value)} is not a number`);
  return n;
};
const ms = (value: string | undefined, name: string) =>
  value === undefined || value === '' ? undefined : parseDuration(value, name);

/** `claude-code=1,codex=1` as weights (the schema checks the names and the weights). */
function mix(value: string | undefined): Record<string, number> | undefined {
  if (value === undefined) return undefined;
  const out: Record<string, number> = {};
  for (const part of value.split(',').filter(Boolean)) {
    const m = /^([^=]+)=(.+)$/.exec(part.trim());
    if (!m)
      throw new ConfigError(
        `--agent-mix: ${JSON.stringify(part)} is not KIND=WEIGHT; write e.g. claude-code=1,codex=1`,
      );
    out[m[1]!] = number(m[2], `--agent-mix ${m[1]}`)!;
  }
  return out;
}

const defined = (values: Values): Values =>
  Object.fromEntries(Object.entries(values).filter(([, v]) => v !== undefined)) as Values;

/** The settings the reference Job Group passes as env vars (and `VIME_ENGINE_URLS`). */
export function configFromEnv(env: Record<string, string | undefined>): Record<string, unknown> {
  const seconds = number(env.AGENT_EVAL_TIMEOUT_SEC, 'AGENT_EVAL_TIMEOUT_SEC');
  const noPool = env.SANDBOX_NO_POOL;
  if (noPool !== undefined && noPool !== '' && noPool !== '0' && noPool !== '1') {
    throw new ConfigError(`SANDBOX_NO_POOL: ${JSON.stringify(noPool)} is not 0 or 1`);
  }
  return defined({
    engineUrls: env.VIME_ENGINE_URLS?.split(/[\s,]+/).filter(Boolean),
    maxTurns: number(env.AGENT_MAX_TURNS, 'AGENT_MAX_TURNS'),
    concurrency: number(env.VIME_ROLLOUT_CONCURRENCY, 'VIME_ROLLOUT_CONCURRENCY'),
    gradeTimeoutMs: seconds === undefined ? undefined : seconds * 1000,
    poolReplicas: number(env.SANDBOX_POOL_REPLICAS, 'SANDBOX_POOL_REPLICAS'),
    noPool: noPool === undefined || noPool === '' ? undefined : noPool === '1',
    perRepo: number(env.SWESMITH_PER_REPO, 'SWESMITH_PER_REPO'),
    poolSuffix: env.SWESMITH_POOL_SUFFIX || undefined,
    dataset: env.SWESMITH_DATASET || undefined,
    repoFilter: env.SWESMITH_REPOS?.split(/\s+/).filter(Boolean),
    sandbox: env.VIME_SANDBOX || undefined,
    imageDir: env.VIME_IMAGE_DIR || undefined,
    wandbProject: env.WANDB_PROJECT || undefined,
  });
}

/** The command line: `--config`, `--resume`, and the fields its other flags set. */
export function configFromFlags(
  args: string[],
  command: string,
): { config: string | undefined; resume: string | undefined; values: Values } {
  const { values: v } = parseFlags(command, args, FLAGS, { maxPositionals: 0 });
  const values = defined({
    steps: number(v.steps, '--steps'),
    promptsPerStep: number(v.prompts, '--prompts'),
    samplesPerPrompt: number(v.samples, '--samples'),
    concurrency: number(v.concurrency, '--concurrency'),
    out: v.out,
    sandbox: v.sandbox,
    imageDir: v['image-dir'],
    engineUrls: v['engine-url'],
    engineKind: v['engine-kind'],
    engineWaitMs: ms(v['engine-wait'], '--engine-wait'),
    standInEngines: number(v.engines, '--engines'),
    standInTokensPerSecond: number(v['engine-tps'], '--engine-tps'),
    engineHealthIntervalMs: ms(v['engine-health-interval'], '--engine-health-interval'),
    engineDeadlineMs: ms(v['engine-deadline'], '--engine-deadline'),
    onWeightUpdate: v['on-weight-update'],
    routingReplayLayers: number(v['routing-replay-layers'], '--routing-replay-layers'),
    routingReplayTopK: number(v['routing-replay-top-k'], '--routing-replay-top-k'),
    tokenizer: v.tokenizer,
    temperature: number(v.temperature, '--temperature'),
    topP: number(v['top-p'], '--top-p'),
    topK: number(v['top-k'], '--top-k'),
    topLogprobs: number(v['top-logprobs'], '--top-logprobs'),
    engineMaxLogprobs: number(v['engine-max-logprobs'], '--engine-max-logprobs'),
    maxTokensPerTurn: number(v['max-tokens'], '--max-tokens'),
    maxContextTokens: number(v['max-context'], '--max-context'),
    stop: v.stop,
    dataset: v.dataset,
    repoFilter: v.repo,
    perRepo: number(v['per-repo'], '--per-repo'),
    invalidRows: v['invalid-rows'],
    poolReplicas: number(v['pool-replicas'], '--pool-replicas'),
    noPool: v['no-pool'],
    poolSuffix: v['pool-suffix'],
    validate: v['no-validate'] ? false : undefined,
    agent: v.agent,
    agentMix: mix(v['agent-mix']),
    agentTimeoutMs: ms(v['agent-timeout'], '--agent-timeout'),
    execTimeoutMs: ms(v['exec-timeout'], '--exec-timeout'),
    harnessRegistry: v['harness-registry'],
    maxTurns: number(v['max-turns'], '--max-turns'),
    gradeTimeoutMs: ms(v['eval-timeout'], '--eval-timeout'),
    rolloutGuardMs: ms(v['rollout-deadline'], '--rollout-deadline'),
    siblingAttempts: number(v['sibling-attempts'], '--sibling-attempts'),
    maxStaleness: number(v['max-staleness'], '--max-staleness'),
    onSuspicious: v.hacks,
    mode: v.mode,
    seed: number(v.seed, '--seed'),
    standInPolicy: v.policy,
    shuffleRewardsSeed: number(v['shuffle-rewards'], '--shuffle-rewards'),
    taskDraw: v['task-draw'],
    taskDrawSeed: number(v['task-draw-seed'], '--task-draw-seed'),
    quiet: v.quiet,
    wandbProject: v['wandb-project'],
  });
  return { config: v.config, resume: v.resume, values };
}
