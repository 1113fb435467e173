/**
 * Every knob of the loop in one table: its field of the resolved `Config`, its key in a config file (a
 * nested layout, as verl and slime configs read), its flag and its env var. Messages name a value the way
 * the user set it; the file's schema, the JSON Schema and the rendered run config all come from here.
 */
import type { ConfigField } from './schema.js';

/**
 * How a file spells a value: as the field (`value`), a duration (`"90s"`, `"10m"`, or a number of
 * seconds; the field holds milliseconds), the field's negation (`warm_pools: true` is `noPool: false`),
 * sandbox limits with byte sizes (`"2GiB"`), or the run's own folder (`output.dir`).
 */
export type KnobKind = 'value' | 'duration' | 'negated' | 'limits';

/** One setting of the run: its config field, its key path in a file, and its flag and env var if any. */
export interface Knob {
  field: ConfigField;
  /** The key path in a config file (`sampling.temperature`). */
  key: string;
  kind: KnobKind;
  /** The flag that sets it (`--temperature`). */
  flag?: string | undefined;
  /** The env var that sets it (the reference Job Group's names). */
  env?: string | undefined;
}

const knob = (
  field: ConfigField,
  key: string,
  options: { kind?: KnobKind | undefined; flag?: string | undefined; env?: string | undefined } = {},
): Knob => ({ field, key, kind: options.kind ?? 'value', flag: options.flag, env: options.env });

/** In file order: the sections a config file has, each knob where a user looks for it. */
export const KNOBS: readonly Knob[] = [
  knob('steps', 'run.steps', { flag: '--steps' }),
  knob('promptsPerStep', 'run.prompts_per_step', { flag: '--prompts' }),
  knob('samplesPerPrompt', 'run.samples_per_prompt', { flag: '--samples' }),
  knob('concurrency', 'run.concurrency', { flag: '--concurrency', env: 'VIME_ROLLOUT_CONCURRENCY' }),
  knob('mode', 'run.mode', { flag: '--mode' }),
  knob('shuffleRewardsSeed', 'run.shuffle_rewards_seed', { flag: '--shuffle-rewards' }),
  knob('taskDraw', 'run.task_draw', { flag: '--task-draw' }),
  knob('taskDrawSeed', 'run.task_draw_seed', { flag: '--task-draw-seed' }),
  knob('rolloutGuardMs', 'run.rollout_deadline', { kind: 'duration', flag: '--rollout-deadline' }),
  knob('engineUrls', 'engines.urls', { flag: '--engine-url', env: 'VIME_ENGINE_URLS' }),
  knob('engineKind', 'engines.kind', { flag: '--engine-kind' }),
  knob('engineMaxLogprobs', 'engines.max_logprobs', { flag: '--engine-max-logprobs' }),
  knob('engineWaitMs', 'engines.wait', { kind: 'duration', flag: '--engine-wait' }),
  knob('engineHealthIntervalMs', 'engines.router.health_interval', {
    kind: 'duration',
    flag: '--engine-health-interval',
  }),
  knob('engineDeadlineMs', 'engines.router.deadline', { kind: 'duration', flag: '--engine-deadline' }),
  knob('onWeightUpdate', 'engines.router.on_weight_update', { flag: '--on-weight-update' }),
  knob('routingReplayLayers', 'engines.routing_replay.layers', { flag: '--routing-replay-layers' }),
  knob('routingReplayTopK', 'engines.routing_replay.top_k', { flag: '--routing-replay-top-k' }),
  knob('standInEngines', 'engines.stand_in.engines', { flag: '--engines' }),
  knob('standInTokensPerSecond', 'engines.stand_in.tokens_per_second', { flag: '--engine-tps' }),
  knob('standInSlots', 'engines.stand_in.slots'),
  knob('standInSpecAcceptLength', 'engines.stand_in.spec_accept_length'),
  knob('odds', 'engines.stand_in.odds'),
  knob('seed', 'engines.stand_in.seed', { flag: '--seed' }),
  knob('standInPolicy', 'engines.stand_in.policy', { flag: '--policy' }),
  knob('tokenizer', 'tokenizer', { flag: '--tokenizer' }),
  knob('temperature', 'sampling.temperature', { flag: '--temperature' }),
  knob('topP', 'sampling.top_p', { flag: '--top-p' }),
  knob('topK', 'sampling.top_k', { flag: '--top-k' }),
  knob('topLogprobs', 'sampling.top_logprobs', { flag: '--top-logprobs' }),
  knob('maxTokensPerTurn', 'sampling.max_tokens_per_turn', { flag: '--max-tokens' }),
  knob('maxContextTokens', 'sampling.max_context_tokens', { flag: '--max-context' }),
  knob('stop', 'sampling.stop', { flag: '--stop' }),
  knob('agent', 'agents.default', { flag: '--agent' }),
  knob('agentMix', 'agents.mix', { flag: '--agent-mix' }),
  knob('maxTurns', 'agents.max_turns', { flag: '--max-turns', env: 'AGENT_MAX_TURNS' }),
  knob('agentTimeoutMs', 'agents.timeout', { kind: 'duration', flag: '--agent-timeout' }),
  knob('execTimeoutMs', 'agents.exec_timeout', { kind: 'duration', flag: '--exec-timeout' }),
  knob('harnessRegistry', 'agents.harness_registry', { flag: '--harness-registry' }),
  knob('sandbox', 'sandbox.provider', { flag: '--sandbox', env: 'VIME_SANDBOX' }),
  knob('imageDir', 'sandbox.image_dir', { flag: '--image-dir', env: 'VIME_IMAGE_DIR' }),
  knob('sandboxLimits', 'sandbox.limits', { kind: 'limits' }),
  knob('poolReplicas', 'sandbox.pool_replicas', { flag: '--pool-replicas', env: 'SANDBOX_POOL_REPLICAS' }),
  knob('noPool', 'sandbox.warm_pools', { kind: 'negated', flag: '--no-pool', env: 'SANDBOX_NO_POOL' }),
  knob('poolSuffix', 'sandbox.pool_suffix', { flag: '--pool-suffix', env: 'SWESMITH_POOL_SUFFIX' }),
  knob('dataset', 'dataset.path', { flag: '--dataset', env: 'SWESMITH_DATASET' }),
  knob('repoFilter', 'dataset.repos', { flag: '--repo', env: 'SWESMITH_REPOS' }),
  knob('perRepo', 'dataset.per_repo', { flag: '--per-repo', env: 'SWESMITH_PER_REPO' }),
  knob('invalidRows', 'dataset.invalid_rows', { flag: '--invalid-rows' }),
  knob('validate', 'dataset.validate', { flag: '--no-validate' }),
  knob('gradeTimeoutMs', 'grading.timeout', {
    kind: 'duration',
    flag: '--eval-timeout',
    env: 'AGENT_EVAL_TIMEOUT_SEC',
  }),
  knob('onSuspicious', 'grading.hacks', { flag: '--hacks' }),
  knob('siblingAttempts', 'queue.sibling_attempts', { flag: '--sibling-attempts' }),
  knob('maxStaleness', 'queue.max_staleness', { flag: '--max-staleness' }),
  knob('out', 'output.dir', { flag: '--out' }),
  knob('quiet', 'output.quiet', { flag: '--quiet' }),
  knob('progressEverySeconds', 'output.progress_every_seconds'),
  knob('tensorboard', 'sinks.tensorboard'),
  knob('wandbProject', 'sinks.wandb_project', { flag: '--wandb-project', env: 'WANDB_PROJECT' }),
];

/** The knob of a field (every field but `resume`, which only the flag sets, has one). */
export function knobOf(field: string): Knob | undefined {
  return KNOBS.find((k) => k.field === field);
}

/** What a sandbox limit is called in a file (snake case, as the rest of the file). */
export const LIMIT_KEYS: Record<string, string> = {
  memory_bytes: 'memoryBytes',
  pids: 'pids',
  cpu_seconds: 'cpuSeconds',
  file_size_bytes: 'fileSizeBytes',
  open_files: 'openFiles',
  tmp_bytes: 'tmpBytes',
  address_space_bytes: 'addressSpaceBytes',
  cpus: 'cpus',
};
