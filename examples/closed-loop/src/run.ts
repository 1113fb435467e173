/**
 * The closed RL loop, phase by phase, each phase keeping what it produced under the run folder:
 *
 *   warmstart  the coding-agent loop with its scripted stand-in policy on every non-held-out task,
 *              then supervised training of the model on those transcripts (`vime_policy.sft`)
 *   eval       a policy server on a checkpoint; the coding-agent loop on the training tasks and on the
 *              held-out tasks, several samples each, no training: pass@1 with its bootstrap interval
 *   train      (train.ts) a policy server, the trainer process, and the coding-agent loop with the
 *              trainer hook: each step's batch is trained on, the new weights are loaded by the server
 *              under the next version, and the next step samples from them
 *   summary    the evidence: per-step metrics and checks, pass@1 before and after, the environment
 *
 * Everything the agent runs is sandboxed (bubblewrap by default) and graded in a fresh sandbox, as in
 * the coding-agent main job.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ConfigError, type RolloutResult, type Sample } from '@vime/core';
import { findPython } from '@vime/core/utils';
import { checkConfig, runLoop } from '@vime/loop';
import { bundledTokenizerDir, startPolicyServer } from './policy-server.js';
import { exampleDir, pythonEnv } from './python.js';
import { type PassAt1, passAt1 } from './stats.js';
import { hasSplit, proceduralSplit, splitTasks, type TaskSplit } from './tasks.js';

export interface ClosedLoopOptions {
  /** The run folder: every phase writes under it. */
  out: string;
  /** SWE-smith JSONL to split into training and held-out tasks; default: the offline task set. */
  dataset?: string | undefined;
  /**
   * `offline`: a seeded split of the offline set (or `dataset`); `procedural`: the generated family's own
   * splits (train / held-out instances / held-out family), a fresh draw of training instances every step
   * and the scripted debugger as the warm start's policy.
   */
  tasks?: 'offline' | 'procedural' | undefined;
  /** The procedural family: generated here from seed and size, or a set generated before (`dir`). */
  procedural?: { seed: number; perFamily: number; dir?: string | undefined } | undefined;
  /**
   * The RL phase's arm: `grpo` (the main run), `shuffled` (GRPO on rewards shuffled within each step, the
   * control that must not rise) or `rft` (rejection-sampling fine-tuning: supervised training on the
   * successful samples of the same rollouts, the "is it RL?" control).
   */
  arm?: 'grpo' | 'shuffled' | 'rft' | undefined;
  /** The run's seed: the fresh draw of training tasks, the reward shuffle, the trainer's seed. */
  seed?: number | undefined;
  /** Tokenizer folder (tokenizer.json + tokenizer_config.json); default: the bundled Qwen3 tokenizer. */
  tokenizer?: string | undefined;
  python?: string | undefined;
  /** `auto | cpu | cuda | cuda:N` for the policy server and the trainer. */
  device: string;
  sandbox: 'bubblewrap' | 'docker' | 'local';
  /** Grade the unchanged repo and the gold patch of every task first (cached per split). */
  validate: boolean;
  trainTasks: number;
  heldoutTasks: number;
  /** Loop: steps, tasks per step (P), samples per task (S, the GRPO group size). */
  steps: number;
  prompts: number;
  samples: number;
  concurrency: number;
  mode: 'sync' | 'async';
  maxTurns: number;
  maxTokensPerTurn: number;
  maxContextTokens: number;
  /** Samples per task of an eval pass. */
  evalSamples: number;
  /** Trainer: backend and flags. */
  backend: 'megatron' | 'torch';
  lr: number;
  trainerArgs: string[];
  /** Replaces `-m vime_megatron.loop_trainer` (a test double in tests). */
  trainerEntry?: string[] | undefined;
  trainerPythonPath?: string[] | undefined;
  /** More policy-server flags. */
  serverArgs: string[];
  /** Warm start: stand-in transcripts (steps × prompts × samples), then SFT. */
  warmstart: {
    steps: number;
    prompts: number;
    samples: number;
    init: string;
    epochs: number;
    args: string[];
  };
  quiet: boolean;
  log: (line: string) => void;
  signal?: AbortSignal | undefined;
}

export const paths = (out: string) => ({
  split: join(out, 'tasks'),
  cache: join(out, 'cache'),
  warmData: join(out, 'warmstart', 'data'),
  warmCkpt: join(out, 'warmstart', 'ckpt'),
  eval: (name: string) => join(out, `eval-${name}`),
  train: join(out, 'train'),
  trainer: join(out, 'train', 'trainer'),
  summary: join(out, 'summary.json'),
});

export function tokenizerOf(options: ClosedLoopOptions): string {
  if (options.tokenizer) return resolve(options.tokenizer);
  // A bundle carries the tokenizer next to the example; a checkout resolves it from the npm package.
  const carried = join(exampleDir, 'tokenizer');
  return existsSync(join(carried, 'tokenizer.json')) ? carried : bundledTokenizerDir();
}

export async function taskSplit(options: ClosedLoopOptions): Promise<TaskSplit> {
  const p = paths(options.out);
  const kind = options.tasks ?? 'offline';
  if (hasSplit(p.split)) {
    const split = JSON.parse(await readFile(join(p.split, 'split.json'), 'utf8')) as TaskSplit;
    if ((split.kind ?? 'offline') !== kind)
      throw new ConfigError(
        `--tasks: ${options.out} holds ${split.kind ?? 'offline'} tasks, not ${kind}; use a new --out or the same --tasks`,
      );
    const trained = (split.ids.trainEval ?? split.ids.train).length;
    if (
      trained !== options.trainTasks ||
      (kind === 'offline' && split.ids.heldout.length !== options.heldoutTasks)
    )
      throw new ConfigError(
        `--train-tasks/--heldout-tasks: ${options.out} was split ${trained}/${split.ids.heldout.length}, not ${options.trainTasks}/${options.heldoutTasks}; use a new --out or the same numbers`,
      );
    return split;
  }
  if (kind === 'procedural') {
    const proc = options.procedural ?? { seed: 1, perFamily: 20 };
    return proceduralSplit({
      dir: p.split,
      setDir: proc.dir,
      cacheDir: p.cache,
      seed: proc.seed,
      perFamily: proc.perFamily,
      trainEval: options.trainTasks,
      heldoutEval: options.heldoutTasks,
      warmTasks: options.warmstart.steps * options.warmstart.prompts,
      signal: options.signal,
      log: options.log,
    });
  }
  return splitTasks({
    dir: p.split,
    dataset: options.dataset,
    cacheDir: p.cache,
    trainTasks: options.trainTasks,
    heldoutTasks: options.heldoutTasks,
    signal: options.signal,
  });
}

/** The coding-agent loop's config for one phase of the closed loop. */
export function loopConfig(options: ClosedLoopOptions, fields: Record<string, unknown>) {
  return checkConfig({
    sandbox: options.sandbox,
    validate: options.validate,
    concurrency: options.concurrency,
    maxTurns: options.maxTurns,
    maxTokensPerTurn: options.maxTokensPerTurn,
    maxContextTokens: options.maxContextTokens,
    tokenizer: tokenizerOf(options),
    quiet: options.quiet,
    poolReplicas: Math.min(4, options.concurrency),
    ...fields,
  });
}

function torchPython(): string {
  const found = findPython();
  if ('missing' in found) throw new ConfigError(`--python: no Python with torch found (${found.missing})`);
  return found.python;
}

export function runPython(options: ClosedLoopOptions, args: string[]): Promise<void> {
  const python = options.python ?? torchPython();
  return new Promise((resolvePromise, reject) => {
    const child = spawn(python, args, {
      cwd: exampleDir,
      env: pythonEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const onLine = (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n')) if (line) options.log(line);
    };
    child.stdout.on('data', onLine);
    child.stderr.on('data', onLine);
    const onAbort = () => child.kill('SIGTERM');
    options.signal?.addEventListener('abort', onAbort, { once: true });
    child.on('error', reject);
    child.on('close', (code) => {
      options.signal?.removeEventListener('abort', onAbort);
      if (code === 0) resolvePromise();
      else
        reject(
          new ConfigError(
            `${python} ${args.slice(0, 2).join(' ')} exited with code ${code} (its output is above)`,
          ),
        );
    });
  });
}

/** Warm start: transcripts of the scripted stand-in policy, then supervised training on them. */
export async function warmstart(options: ClosedLoopOptions): Promise<string> {
  const p = paths(options.out);
  const split = await taskSplit(options);
  const w = options.warmstart;
  // Procedural tasks: the scripted debugger (reproduces, reads, edits by heuristics; never a gold patch)
  // on training instances only; else the scripted stand-in on every non-held-out task.
  const debuggerPolicy = split.kind === 'procedural';
  if (!existsSync(join(p.warmData, 'report.json'))) {
    options.log(
      `warm start: the stand-in policy (${debuggerPolicy ? 'the scripted debugger' : 'scripted'}, not a model) on ${debuggerPolicy ? `${split.ids.warmstartOnly.length} training` : split.ids.train.length + split.ids.warmstartOnly.length} tasks, ${w.steps} steps x ${w.prompts} x ${w.samples}`,
    );
    const config = loopConfig(options, {
      out: p.warmData,
      dataset: split.warmstart,
      ...(debuggerPolicy ? { standInPolicy: 'debugger' } : {}),
      steps: w.steps,
      promptsPerStep: w.prompts,
      samplesPerPrompt: w.samples,
      // The stand-in's own budget: its replies are short, every rollout should finish.
      maxTokensPerTurn: 1024,
    });
    await runLoop(config, { log: options.log, signal: options.signal });
  }
  options.log(`warm start: supervised training of ${w.init} on ${p.warmData}/steps -> ${p.warmCkpt}`);
  await runPython(options, [
    '-m',
    'vime_policy.sft',
    '--data',
    join(p.warmData, 'steps'),
    '--init',
    w.init,
    '--out',
    p.warmCkpt,
    '--epochs',
    String(w.epochs),
    '--holdout',
    join(p.split, 'heldout-ids.txt'),
    '--tokenizer',
    tokenizerOf(options),
    '--device',
    options.device,
    ...w.args,
  ]);
  return p.warmCkpt;
}

export interface EvalResult {
  name: string;
  model: string;
  weightVersion: string;
  samples: number;
  train: PassAt1;
  heldout: PassAt1 | null;
  /** Procedural tasks: the operator family held out entirely. */
  heldoutFamily?: PassAt1 | null | undefined;
  seconds: number;
}

async function stepResults(out: string): Promise<RolloutResult[]> {
  return JSON.parse(await readFile(join(out, 'steps', '1.results.json'), 'utf8')) as RolloutResult[];
}

/** An eval pass: the checkpoint served, the loop without training on the training and held-out tasks. */
export async function evaluate(
  options: ClosedLoopOptions,
  name: string,
  model: string,
  weightVersion = name,
): Promise<EvalResult> {
  const started = performance.now();
  const split = await taskSplit(options);
  const dir = paths(options.out).eval(name);
  await mkdir(dir, { recursive: true });
  const server = await startPolicyServer({
    modelPath: resolve(model),
    tokenizerPath: tokenizerOf(options),
    python: options.python,
    device: options.device,
    args: ['--weight-version', weightVersion, ...options.serverArgs],
    signal: options.signal,
  });
  const pass = async (which: 'train' | 'heldout' | 'heldout_family', dataset: string, tasks: number) => {
    const out = join(dir, which);
    options.log(`eval ${name}: ${tasks} ${which} tasks x ${options.evalSamples} samples on ${model}`);
    const config = loopConfig(options, {
      out,
      dataset,
      engineUrls: [server.url],
      steps: 1,
      promptsPerStep: tasks,
      samplesPerPrompt: options.evalSamples,
    });
    await runLoop(config, { log: options.log, signal: options.signal });
    return passAt1(await stepResults(out), options.evalSamples);
  };
  try {
    const trainIds = split.ids.trainEval ?? split.ids.train;
    const train = await pass('train', split.trainEval ?? split.train, trainIds.length);
    const heldout = split.ids.heldout.length
      ? await pass('heldout', split.heldout, split.ids.heldout.length)
      : null;
    const family = split.ids.heldoutFamily ?? [];
    const heldoutFamily =
      split.heldoutFamily && family.length
        ? await pass('heldout_family', split.heldoutFamily, family.length)
        : null;
    const result: EvalResult = {
      name,
      model: resolve(model),
      weightVersion,
      samples: options.evalSamples,
      train,
      heldout,
      ...(split.kind === 'procedural' ? { heldoutFamily } : {}),
      seconds: (performance.now() - started) / 1000,
    };
    await writeFile(join(dir, 'eval.json'), `${JSON.stringify(result, null, 2)}\n`);
    return result;
  } finally {
    await server.close();
  }
}

/** The same row scored under the weights the server serves now (teacher forcing). */
export async function scoreRow(url: string, row: Sample, signal?: AbortSignal): Promise<Float32Array> {
  const res = await fetch(`${url}/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      input_ids: Array.from(row.tokens),
      sampling_params: { max_new_tokens: 1, temperature: 1 },
      return_logprob: true,
      // From the last prompt token: only the response is scored (its last entries are the response's).
      logprob_start_len: Math.max(0, row.tokens.length - row.response_length - 1),
    }),
    ...(signal ? { signal } : {}),
  });
  if (!res.ok) throw new ConfigError(`scoring a row on ${url}: HTTP ${res.status} ${await res.text()}`);
  const answer = (await res.json()) as {
    meta_info: { input_token_logprobs: Array<[number | null, number]> };
  };
  const all = answer.meta_info.input_token_logprobs.map((e) => e[0] ?? 0);
  return Float32Array.from(all.slice(all.length - row.response_length));
}
