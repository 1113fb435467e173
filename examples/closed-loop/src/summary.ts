/**
 * The evidence of a closed-loop run (`summary.json`): how it was run (command, code version, machine,
 * versions), the per-step table (mean reward, pass@1, weight version served, trainer log-prob gap,
 * timings, checks), pass@1 before and after on the training and held-out tasks with bootstrap 95%
 * intervals, and the verdicts of every claim it is meant to show.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { copyFile, mkdir, readdir, writeFile } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { checkStep, type StepChecks } from './checks.js';
import { exampleDir } from './python.js';
import type { EvalResult } from './run.js';
import { paths } from './run.js';
import { type PassDelta, passDelta } from './stats.js';
import type { StepRecord, TrainRunResult } from './train.js';

const readJson = <T>(path: string): T | null =>
  existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as T) : null;

function quiet(cmd: string, args: string[]): string | null {
  try {
    return execFileSync(cmd, args, {
      encoding: 'utf8',
      timeout: 10_000,
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return null;
  }
}

/** The code's version: the checkout's commit, else the bundle's `VERSION` file. */
function codeVersion(): string | null {
  const git = quiet('git', ['-C', exampleDir, 'rev-parse', 'HEAD']);
  if (git) return git;
  const file = join(exampleDir, 'VERSION');
  return existsSync(file) ? readFileSync(file, 'utf8').trim() : null;
}

export interface Claims {
  stepsAtLeast10: boolean;
  batchAtLeast8x8: boolean;
  everyDumpPassesCheck: boolean;
  everyStepPassesTokenAudit: boolean;
  everyRowCarriesItsVersion: boolean;
  versionChangesEveryStep: boolean;
  trainPassRises: boolean | null;
}

export interface Summary {
  command: string[];
  code: string | null;
  machine: { cpus: number; memoryGiB: number; gpu: string | null; node: string };
  trainer: TrainRunResult['trainer'] | null;
  /** The RL phase's arm (grpo, shuffled, rft) and seed. */
  arm: string | null;
  seed: number | null;
  steps: Array<
    Omit<StepRecord, 'train' | 'checks' | 'versions'> & {
      trainSeconds: number;
      weightUpdateSeconds: number;
      loss: number | null;
      /** `not-applicable` (and null below) for the rejection-sampling arm: no GRPO dumps. */
      grpoCheck: StepChecks['grpoCheck']['verdict'] | 'not-applicable';
      tokenAudit: boolean | null;
      versionsOk: boolean | null;
    }
  >;
  eval: {
    initial: EvalResult | null;
    final: EvalResult | null;
    trainDelta: PassDelta | null;
    heldoutDelta: PassDelta | null;
    heldoutFamilyDelta: PassDelta | null;
    /**
     * Every eval pass by the weight version it measured (initial, each `--name step-N` checkpoint, final):
     * training, held-out and held-out-family pass@1 side by side.
     */
    curve: Array<{
      name: string;
      weightVersion: string;
      train: number | null;
      heldout: number | null;
      heldoutFamily: number | null;
    }>;
  };
  claims: Claims;
  report: string | null;
}

export async function writeSummary(out: string, command: string[]): Promise<Summary> {
  const p = paths(out);
  const run = readJson<TrainRunResult>(join(p.train, 'closed-loop.json'));
  const initial = readJson<EvalResult>(join(p.eval('initial'), 'eval.json'));
  const final = readJson<EvalResult>(join(p.eval('final'), 'eval.json'));
  // The checks run again on the files each step left (its batch and the trainer's dumps), so a summary
  // made later with a fixed checker says what the files show; a step whose files are gone keeps its record.
  const mode = readJson<{ mode?: string | undefined }>(join(p.train, 'config.json'))?.mode;
  const rechecked = await Promise.all(
    (run?.steps ?? []).map(async (s) => {
      const batchPath = join(p.train, 'steps', `${s.step}.msgpack`);
      const dumps = ['rollout_data', 'train_data'].map((d) => join(p.trainer, d, `${s.step}.pt`));
      if (!existsSync(batchPath) || !dumps.every((d) => existsSync(d))) return s;
      const checks = await checkStep({
        step: s.step,
        batchPath,
        trainerOut: p.trainer,
        expectedVersion: mode === 'async' ? undefined : s.servedVersion,
      });
      return { ...s, checks };
    }),
  );
  const steps = rechecked.map(({ train, checks, versions, ...s }) => ({
    ...s,
    trainSeconds: train.trainSeconds,
    weightUpdateSeconds: train.weightUpdateSeconds,
    loss: train.metrics.loss ?? null,
    grpoCheck: checks ? checks.grpoCheck.verdict : ('not-applicable' as const),
    tokenAudit: checks ? checks.tokenAudit.ok : null,
    versionsOk: checks ? checks.versions.ok : (versions?.ok ?? null),
  }));
  const trainDelta = initial && final ? passDelta(initial.train, final.train) : null;
  const heldoutDelta = initial?.heldout && final?.heldout ? passDelta(initial.heldout, final.heldout) : null;
  const heldoutFamilyDelta =
    initial?.heldoutFamily && final?.heldoutFamily
      ? passDelta(initial.heldoutFamily, final.heldoutFamily)
      : null;
  const curve = (await evalPasses(out)).map((r) => ({
    name: r.name,
    weightVersion: r.weightVersion,
    train: r.train.value,
    heldout: r.heldout?.value ?? null,
    heldoutFamily: r.heldoutFamily?.value ?? null,
  }));
  const config = readJson<{ promptsPerStep: number; samplesPerPrompt: number }>(join(p.train, 'config.json'));
  const served = steps.map((s) => s.servedVersion);
  const claims: Claims = {
    stepsAtLeast10: steps.length >= 10,
    batchAtLeast8x8: (config?.promptsPerStep ?? 0) >= 8 && (config?.samplesPerPrompt ?? 0) >= 8,
    everyDumpPassesCheck: steps.length > 0 && steps.every((s) => s.grpoCheck === 'match'),
    everyStepPassesTokenAudit: steps.length > 0 && steps.every((s) => s.tokenAudit),
    everyRowCarriesItsVersion: steps.length > 0 && steps.every((s) => s.versionsOk),
    versionChangesEveryStep:
      steps.length > 0 &&
      new Set(served).size === served.length &&
      steps.every((s) => s.nextVersion !== '' && s.nextVersion !== s.servedVersion),
    trainPassRises: trainDelta ? trainDelta.significant : null,
  };
  const gpu = quiet('nvidia-smi', ['--query-gpu=name,memory.total,driver_version', '--format=csv,noheader']);
  const summary: Summary = {
    command,
    code: codeVersion(),
    machine: {
      cpus: cpus().length,
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      gpu,
      node: process.version,
    },
    trainer: run?.trainer ?? null,
    arm: run?.arm ?? null,
    seed: run?.seed ?? null,
    steps,
    eval: { initial, final, trainDelta, heldoutDelta, heldoutFamilyDelta, curve },
    claims,
    report: run?.summary.reportHtml ?? null,
  };
  await writeFile(p.summary, `${JSON.stringify(summary, null, 2)}\n`);
  await collectEvidence(out);
  return summary;
}

/** Every eval pass of the run (`eval-<name>/eval.json`), by weight version (initial first). */
async function evalPasses(out: string): Promise<EvalResult[]> {
  if (!existsSync(out)) return [];
  const names = (await readdir(out)).filter((n) => n.startsWith('eval-'));
  const results = names
    .map((n) => readJson<EvalResult>(join(out, n, 'eval.json')))
    .filter((r): r is EvalResult => r !== null);
  const order = (r: EvalResult) => (/^\d+$/.test(r.weightVersion) ? Number(r.weightVersion) : -1);
  return results.sort((a, b) => order(a) - order(b) || a.name.localeCompare(b.name));
}

/** The run's small files, gathered in `<out>/evidence/` to be kept (checkpoints and dumps stay behind). */
const EVIDENCE = [
  'summary.json',
  'tasks/split.json',
  'tasks/heldout-ids.txt',
  'warmstart/ckpt/sft_log.json',
  'warmstart/data/report.json',
  'eval-initial/eval.json',
  'eval-final/eval.json',
  'train/config.json',
  'train/report.json',
  'train/report.html',
  'train/metrics.jsonl',
  'train/closed-loop.json',
  'train/closed-loop-steps.jsonl',
  'train/trainer/metrics.jsonl',
];

async function collectEvidence(out: string): Promise<void> {
  const more: string[] = [];
  if (existsSync(out))
    for (const n of await readdir(out)) if (n.startsWith('eval-step-')) more.push(`${n}/eval.json`);
  const draws = join(out, 'train', 'draws');
  if (existsSync(draws)) for (const n of await readdir(draws)) more.push(`train/draws/${n}`);
  for (const rel of [...EVIDENCE, ...more]) {
    const from = join(out, rel);
    if (!existsSync(from)) continue;
    const to = join(out, 'evidence', rel.replaceAll('/', '__'));
    await mkdir(dirname(to), { recursive: true });
    await copyFile(from, to);
  }
}

const pct = (v: number | null | undefined) =>
  v === null || v === undefined ? '-' : `${(v * 100).toFixed(1)}%`;
const ci = (c: [number, number] | null | undefined) =>
  c ? `[${(c[0] * 100).toFixed(1)}, ${(c[1] * 100).toFixed(1)}]` : '';

/** The summary as a few lines for the terminal. */
export function renderSummary(s: Summary): string {
  const lines = [
    'step  reward  pass@1  served  next  |dlogp|   train s  update s  check  audit  versions',
    ...s.steps.map((st) =>
      [
        String(st.step).padEnd(4),
        (st.meanReward ?? 0).toFixed(3).padEnd(6),
        pct(st.passAt1).padEnd(6),
        String(st.servedVersion).padEnd(6),
        st.nextVersion.padEnd(4),
        (st.logprobAbsDiffMean?.toExponential(2) ?? '-').padEnd(8),
        st.trainSeconds.toFixed(2).padEnd(7),
        st.weightUpdateSeconds.toFixed(2).padEnd(8),
        st.grpoCheck.slice(0, 5).padEnd(5),
        String(st.tokenAudit).padEnd(5),
        String(st.versionsOk),
      ].join('  '),
    ),
  ];
  const e = s.eval;
  for (const [name, pick, d] of [
    ['train', (r: EvalResult) => r.train, e.trainDelta],
    ['held-out', (r: EvalResult) => r.heldout, e.heldoutDelta],
    ['held-out family', (r: EvalResult) => r.heldoutFamily ?? null, e.heldoutFamilyDelta],
  ] as const) {
    const a = e.initial ? pick(e.initial) : null;
    const b = e.final ? pick(e.final) : null;
    if (name === 'held-out family' && !a && !b) continue;
    lines.push(
      `pass@1 ${name}: initial ${pct(a?.value)} ${ci(a?.ci)}, final ${pct(b?.value)} ${ci(b?.ci)}, change ${pct(d?.value)} ${ci(d?.ci)}`,
    );
  }
  if (e.curve.length > 2)
    for (const c of e.curve)
      lines.push(
        `eval ${c.name} (version ${c.weightVersion}): train ${pct(c.train)}, held-out ${pct(c.heldout)}, held-out family ${pct(c.heldoutFamily)}`,
      );
  if (s.arm) lines.push(`arm: ${s.arm}, seed ${s.seed}`);
  lines.push(`claims: ${JSON.stringify(s.claims)}`);
  return lines.join('\n');
}
