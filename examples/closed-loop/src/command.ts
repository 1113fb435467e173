/** The `vime-closed-loop` command line: flags, phases and their order. */
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import { didYouMean, parseFlags, UsageError, wantsHelp } from '@vime/core/utils';
import { type ClosedLoopOptions, evaluate, paths, warmstart } from './run.js';
import { renderSummary, writeSummary } from './summary.js';
import { train } from './train.js';

export const usage = `Usage: vime-closed-loop <phase> [flags]

The closed RL loop: a Qwen3-architecture policy served on SGLang's wire, the coding-agent loop
(bubblewrap sandboxes, fresh-sandbox grading) sampling from it, a GRPO trainer training on each step's
batch and loading the new weights into the server under the next weight version.

Phases (each keeps what it produced under --out; "all" skips a phase whose output is there):
  warmstart   transcripts of the scripted stand-in policy on the non-held-out tasks, then supervised
              training of --warm-init on them (-> OUT/warmstart/ckpt)
  eval        pass@1 of --model on the training and held-out tasks (--name initial|final|step-N)
  train       the RL loop: --steps steps of --prompts tasks x --samples samples (-> OUT/train)
  summary     OUT/summary.json: per-step metrics and checks, pass@1 before/after, the machine
  all         warmstart (unless --model is given), eval initial, train, eval step-K, step-2K, ...
              (--eval-every K), eval final, summary

Flags:
  --out DIR              run folder (default runs/closed-loop)
  --model DIR            checkpoint to start from (default: OUT/warmstart/ckpt)
  --name NAME            eval: initial | final | step-N (default initial; final evaluates the last
                         trained checkpoint, step-N the checkpoint of step N, unless --model is given)
  --eval-every K         all: also evaluate every K-th step's checkpoint after training (default 0: none)
  --steps N              RL steps (default 10)
  --prompts N            tasks per step, P (default 8)
  --samples N            samples per task, S: the GRPO group size (default 8)
  --tasks offline|procedural
                         offline (default): a seeded split of the offline set (or --dataset);
                         procedural: the generated family's own splits (train / held-out instances /
                         held-out operator family), fresh training instances every step (drawn without
                         replacement, each step's draw in train/draws/), the scripted debugger as the
                         warm start's policy on training instances the RL never draws
  --procedural-seed N    the family's generator seed (default 1)
  --per-family N         instances per operator family the generator keeps (default 20)
  --procedural-dir DIR   a family generated before (\`vime-swe procedural DIR\`) instead of generating
  --dataset FILE         SWE-smith JSONL to split (default: the offline task set)
  --train-tasks N        training tasks (default 8: every step trains on the same tasks; procedural:
                         the training instances each eval pass measures)
  --heldout-tasks N      held-out tasks, never trained on nor imitated (default 16; procedural: of
                         each held-out set, instances and family)
  --arm grpo|shuffled|rft
                         the RL phase's arm: grpo (default); shuffled (GRPO on rewards shuffled within
                         each step, seeded by --seed); rft (rejection-sampling fine-tuning: SFT on the
                         successful samples of the same rollouts, same sample budget)
  --seed N               the run's seed: the training draw, the reward shuffle, the trainer (default 1)
  --eval-samples N       samples per task of an eval pass (default 8)
  --concurrency N        rollouts at once (default 64)
  --mode sync|async      sync: train between steps; async: train step N while N+1 rolls out
  --max-turns N          model calls per rollout (default 4)
  --max-tokens N         tokens per model call (default 512)
  --max-context N        context tokens per rollout (default 8192)
  --backend B            megatron | torch (default megatron: megatron.core on CUDA; with --device
                         cpu, torch: a plain torch step, labelled as such)
  --lr X                 trainer learning rate (default 5e-5)
  --trainer-arg A        one more trainer flag (repeatable)
  --server-arg A         one more policy-server flag (repeatable)
  --device D             auto | cpu | cuda | cuda:N (default auto)
  --sandbox KIND         bubblewrap | docker | local (default bubblewrap)
  --no-validate          skip the baseline check of the tasks
  --tokenizer DIR        tokenizer folder (default: the bundled Qwen3 tokenizer)
  --python PATH          Python with torch (default: python3, then /usr/bin/python3; or VIME_PYTHON)
  --warm-steps N --warm-prompts N --warm-samples N   stand-in transcripts (default 6 x 8 x 4)
  --warm-init PRESET|DIR the model the warm start trains (default small)
  --warm-epochs N        (default 20)
  --sft-arg A            one more vime_policy.sft flag (repeatable)
  --quiet                no progress lines
  -h, --help             this text
`;

const FLAGS = {
  out: { type: 'string' },
  model: { type: 'string' },
  name: { type: 'string' },
  steps: { type: 'string' },
  prompts: { type: 'string' },
  samples: { type: 'string' },
  dataset: { type: 'string' },
  tasks: { type: 'string' },
  'procedural-seed': { type: 'string' },
  'per-family': { type: 'string' },
  'procedural-dir': { type: 'string' },
  arm: { type: 'string' },
  seed: { type: 'string' },
  'eval-every': { type: 'string' },
  'train-tasks': { type: 'string' },
  'heldout-tasks': { type: 'string' },
  'eval-samples': { type: 'string' },
  concurrency: { type: 'string' },
  mode: { type: 'string' },
  'max-turns': { type: 'string' },
  'max-tokens': { type: 'string' },
  'max-context': { type: 'string' },
  backend: { type: 'string' },
  lr: { type: 'string' },
  'trainer-arg': { type: 'string', multiple: true },
  'server-arg': { type: 'string', multiple: true },
  device: { type: 'string' },
  sandbox: { type: 'string' },
  'no-validate': { type: 'boolean' },
  tokenizer: { type: 'string' },
  python: { type: 'string' },
  'warm-steps': { type: 'string' },
  'warm-prompts': { type: 'string' },
  'warm-samples': { type: 'string' },
  'warm-init': { type: 'string' },
  'warm-epochs': { type: 'string' },
  'sft-arg': { type: 'string', multiple: true },
  quiet: { type: 'boolean' },
} as const;

const PHASES = ['warmstart', 'eval', 'train', 'summary', 'all'] as const;
type Phase = (typeof PHASES)[number];

function choice<T extends string>(
  flag: string,
  value: string | undefined,
  allowed: readonly T[],
  fallback: T,
): T {
  if (value === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(value))
    throw new ConfigError(`--${flag}: ${JSON.stringify(value)} is not one of ${allowed.join(', ')}`);
  return value as T;
}

function count(flag: string, value: string | undefined, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min)
    throw new ConfigError(`--${flag}: ${JSON.stringify(value)} is not a whole number >= ${min}`);
  return n;
}

export function parseCli(
  argv: string[],
  log: (line: string) => void,
):
  | {
      phase: Phase;
      options: ClosedLoopOptions;
      model?: string | undefined;
      name: string;
      evalEvery: number;
    }
  | 'help' {
  const args = argv.filter((a) => a !== '--');
  if (wantsHelp(args)) return 'help';
  const { values: v, positionals } = parseFlags('vime-closed-loop', args, FLAGS);
  if (positionals.length !== 1)
    throw new ConfigError(
      `give one phase: ${PHASES.join(', ')} (got ${positionals.length ? positionals.join(' ') : 'none'})`,
    );
  const phase = positionals[0] as Phase;
  if (!PHASES.includes(phase))
    throw new UsageError(
      `unknown phase ${JSON.stringify(phase)}${didYouMean(phase, PHASES)}: give one of ${PHASES.join(', ')}`,
    );
  const lr = v.lr === undefined ? 5e-5 : Number(v.lr);
  if (!Number.isFinite(lr) || lr <= 0)
    throw new ConfigError(`--lr: ${JSON.stringify(v.lr)} is not a positive number`);
  const options: ClosedLoopOptions = {
    out: resolve(v.out ?? join('runs', 'closed-loop')),
    dataset: v.dataset,
    tasks: choice('tasks', v.tasks, ['offline', 'procedural'] as const, 'offline'),
    procedural: {
      seed: count('procedural-seed', v['procedural-seed'], 1, 0),
      perFamily: count('per-family', v['per-family'], 20),
      dir: v['procedural-dir'],
    },
    arm: choice('arm', v.arm, ['grpo', 'shuffled', 'rft'] as const, 'grpo'),
    seed: count('seed', v.seed, 1, 0),
    tokenizer: v.tokenizer,
    python: v.python ?? process.env.VIME_PYTHON,
    device: v.device ?? 'auto',
    sandbox: choice('sandbox', v.sandbox, ['bubblewrap', 'docker', 'local'] as const, 'bubblewrap'),
    validate: !v['no-validate'],
    trainTasks: count('train-tasks', v['train-tasks'], 8),
    heldoutTasks: count('heldout-tasks', v['heldout-tasks'], 16, 0),
    steps: count('steps', v.steps, 10),
    prompts: count('prompts', v.prompts, 8),
    samples: count('samples', v.samples, 8),
    concurrency: count('concurrency', v.concurrency, 64),
    mode: choice('mode', v.mode, ['sync', 'async'] as const, 'sync'),
    maxTurns: count('max-turns', v['max-turns'], 4),
    maxTokensPerTurn: count('max-tokens', v['max-tokens'], 512),
    maxContextTokens: count('max-context', v['max-context'], 8192),
    evalSamples: count('eval-samples', v['eval-samples'], 8),
    backend: choice(
      'backend',
      v.backend,
      ['megatron', 'torch'] as const,
      v.device === 'cpu' ? 'torch' : 'megatron',
    ),
    lr,
    trainerArgs: v['trainer-arg'] ?? [],
    serverArgs: v['server-arg'] ?? [],
    warmstart: {
      steps: count('warm-steps', v['warm-steps'], 6),
      prompts: count('warm-prompts', v['warm-prompts'], 8),
      samples: count('warm-samples', v['warm-samples'], 4),
      init: v['warm-init'] ?? 'small',
      epochs: count('warm-epochs', v['warm-epochs'], 20),
      args: v['sft-arg'] ?? [],
    },
    quiet: v.quiet ?? false,
    log,
  };
  if (v.tasks !== 'procedural')
    for (const flag of ['procedural-seed', 'per-family', 'procedural-dir'] as const)
      if (v[flag] !== undefined)
        throw new ConfigError(`--${flag}: only with --tasks procedural; add --tasks procedural or drop it`);
  if (v.tasks === 'procedural' && v.dataset !== undefined)
    throw new ConfigError(
      `--dataset: --tasks procedural uses the generated family; drop --dataset or use --tasks offline`,
    );
  for (const [flag, dir] of [
    ['model', v.model],
    ['tokenizer', v.tokenizer],
    ['procedural-dir', v['procedural-dir']],
  ] as const) {
    if (dir !== undefined && !existsSync(dir))
      throw new ConfigError(`--${flag}: ${dir} does not exist; give a folder`);
  }
  const name = v.name ?? 'initial';
  if (!['initial', 'final'].includes(name) && !/^step-[1-9]\d*$/.test(name))
    throw new ConfigError(
      `--name: ${JSON.stringify(name)} is not initial, final or step-N (N a step number)`,
    );
  const evalEvery = count('eval-every', v['eval-every'], 0, 0);
  return { phase, options, ...(v.model ? { model: resolve(v.model) } : {}), name, evalEvery };
}

/** The last checkpoint the trainer wrote (`weights/step-N` with the largest N). */
export function lastCheckpoint(out: string): string | undefined {
  const dir = join(paths(out).trainer, 'weights');
  if (!existsSync(dir)) return undefined;
  const steps = readdirSync(dir)
    .map((n) => /^step-(\d+)$/.exec(n))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]));
  return steps.length ? join(dir, `step-${Math.max(...steps)}`) : undefined;
}

export async function runPhase(
  phase: Phase,
  options: ClosedLoopOptions,
  model: string | undefined,
  name: string,
  command: string[],
  evalEvery = 0,
): Promise<void> {
  const p = paths(options.out);
  const start = (): string => {
    if (model) return model;
    if (existsSync(join(p.warmCkpt, 'config.json'))) return p.warmCkpt;
    throw new ConfigError(
      `--model: no checkpoint given and none at ${p.warmCkpt}; run the warmstart phase or pass --model`,
    );
  };
  const done = (file: string) => phase === 'all' && existsSync(file);
  if (phase === 'warmstart' || (phase === 'all' && !model && !existsSync(join(p.warmCkpt, 'config.json'))))
    await warmstart(options);
  if (phase === 'warmstart') return;
  const stepCheckpoint = (n: number) => {
    const dir = join(p.trainer, 'weights', `step-${n}`);
    if (!existsSync(join(dir, 'config.json')))
      throw new ConfigError(
        `--name step-${n}: no checkpoint of step ${n} at ${dir}; run the train phase first`,
      );
    return dir;
  };
  if (phase === 'eval' && /^step-\d+$/.test(name) && !model) {
    const n = Number(name.slice('step-'.length));
    await evaluate(options, name, stepCheckpoint(n), String(n));
    return;
  }
  if (phase === 'eval') {
    const final = lastCheckpoint(options.out);
    const target = name === 'final' && !model ? final : start();
    if (!target)
      throw new ConfigError(
        `--name final: no trained checkpoint under ${p.trainer}; run the train phase first`,
      );
    const version = name === 'final' && target === final ? (/step-(\d+)$/.exec(target)?.[1] ?? name) : '0';
    await evaluate(options, name, target, version);
    return;
  }
  if (phase === 'all' && !done(join(p.eval('initial'), 'eval.json')))
    await evaluate(options, 'initial', start(), '0');
  if (phase === 'train' || (phase === 'all' && !done(join(p.train, 'closed-loop.json'))))
    await train(options, start());
  if (phase === 'all' && evalEvery > 0) {
    for (let n = evalEvery; n <= options.steps; n += evalEvery) {
      const dir = join(p.trainer, 'weights', `step-${n}`);
      if (!existsSync(join(dir, 'config.json')) || done(join(p.eval(`step-${n}`), 'eval.json'))) continue;
      await evaluate(options, `step-${n}`, dir, String(n));
    }
  }
  if (phase === 'all' && !done(join(p.eval('final'), 'eval.json'))) {
    const final = lastCheckpoint(options.out);
    if (final) await evaluate(options, 'final', final, /step-(\d+)$/.exec(final)?.[1] ?? 'final');
  }
  if (phase === 'summary' || phase === 'all' || phase === 'train') {
    const summary = await writeSummary(options.out, command);
    options.log(`\n${renderSummary(summary)}\nsummary: ${p.summary}`);
  }
}
