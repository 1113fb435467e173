/**
 * The `vime-grpo` command line: `check` compares a slime trainer's dumped advantages with a recomputation;
 * `audit` checks a batch's trained tokens against the captured turns.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError, VimeError } from '@vime/core';
import { auditMain } from './audit-command.js';
import {
  CHECK_ESTIMATORS,
  type CheckEstimator,
  type CheckOptions,
  type CheckReport,
  checkAgainstTrainer,
} from './check/check.js';
import { readRolloutDump, readTrainDump } from './check/dump.js';
import { PRESETS, type Preset } from './estimators/presets.js';

export interface Io {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

const USAGE = `usage: vime-grpo check <rollout.pt> <train.pt> [options]
       vime-grpo check <train.pt> --group-size N [options]
       vime-grpo audit <batch.jsonl> <turns.jsonl> [--json]   (vime-grpo audit --help)

Recompute the advantages of a slime run from its debug dumps (--save-debug-rollout-data,
--save-debug-train-data), or of dumps in that format, and compare them with the trainer's own
per-token advantages.

options:
  --preset P               ${PRESETS.join(' | ')} | auto (default slime); auto tries every
                           known convention and names the ones that reproduce the trainer
  --estimator E            ${CHECK_ESTIMATORS.join(' | ')} (default grpo)
  --no-std-normalization   mean-centring only (Dr.GRPO: verl norm_adv_by_std_in_grpo=False, ...)
  --scale S                group | batch | none (TRL scale_rewards)
  --group-size N           positional groups of N (default: the samples' group_index)
  --reward-key K           scalar key of dict rewards (slime --reward-key)
  --kl-coef X              slime --kl-coef (default 0)
  --opd-kl-coef X          slime --use-opd with --opd-kl-coef X
  --normalize-advantages   slime --normalize-advantages (default: on for reinforce_plus_plus*)
  --no-normalize-advantages
  --per-rollout            rows that share a rollout id count once in their group (a rollout recorded as
                           several samples), as the slime bridge and the closed-loop trainer normalise
  --atol A --rtol R        tolerance |a - e| <= A + R*|e| (default 1e-6, 1e-5)
  --json                   print the report as JSON

exit status: 0 the trainer agrees, 1 it does not (the report says where), 2 an input is unreadable
or not a slime dump.
`;

export async function main(argv: string[], io: Io): Promise<number> {
  if (argv[0] === 'audit') return auditMain(argv.slice(1), io);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    // parseArgs throws TypeErrors coded ERR_PARSE_ARGS_* for unknown flags; ours are ConfigErrors.
    const code = (error as NodeJS.ErrnoException).code ?? '';
    if (!ConfigError.isInstance(error) && !code.startsWith('ERR_PARSE_ARGS')) throw error;
    io.stderr.write(`vime-grpo: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (parsed === 'help') {
    io.stdout.write(USAGE);
    return 0;
  }
  const { rolloutPath, trainPath, options, json } = parsed;
  let report: CheckReport;
  try {
    const trainDump = readTrainDump(read(trainPath), trainPath);
    if (rolloutPath) {
      report = checkAgainstTrainer(
        { rolloutDump: readRolloutDump(read(rolloutPath), rolloutPath), trainDump },
        options,
      );
    } else {
      report = checkAgainstTrainer({ trainDump }, options);
    }
  } catch (error) {
    // Unreadable, corrupt or inconsistent dumps are Vime errors (exit 2); anything else is a bug.
    if (!VimeError.isInstance(error)) throw error;
    io.stderr.write(`vime-grpo check: ${error.message}\n`);
    return 2;
  }
  io.stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : render(report, rolloutPath, trainPath));
  return report.verdict === 'match' ? 0 : 1;
}

function read(path: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(path));
  } catch (error) {
    throw new ConfigError(`cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? error}`, {
      cause: error,
    });
  }
}

function parse(argv: string[]) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      preset: { type: 'string' },
      estimator: { type: 'string' },
      'group-size': { type: 'string' },
      'reward-key': { type: 'string' },
      'kl-coef': { type: 'string' },
      'opd-kl-coef': { type: 'string' },
      'normalize-advantages': { type: 'boolean' },
      'no-normalize-advantages': { type: 'boolean' },
      'no-std-normalization': { type: 'boolean' },
      'per-rollout': { type: 'boolean' },
      scale: { type: 'string' },
      atol: { type: 'string' },
      rtol: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help || positionals[0] === 'help') return 'help' as const;
  const [command, ...files] = positionals;
  if (command !== 'check')
    throw new ConfigError(command ? `unknown command ${JSON.stringify(command)}` : 'missing command');
  if (files.length === 0 || files.length > 2)
    throw new ConfigError('check needs <rollout.pt> <train.pt> (or <train.pt> with --group-size)');
  const [rolloutPath, trainPath] = files.length === 2 ? [files[0], files[1]!] : [undefined, files[0]!];
  if (!rolloutPath && values['group-size'] === undefined) {
    throw new ConfigError("with only a train dump, pass --group-size (the run's --n-samples-per-prompt)");
  }
  const number = (name: string, v: string | undefined) => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n)) throw new ConfigError(`--${name} must be a number, found ${JSON.stringify(v)}`);
    return n;
  };
  const preset = values.preset as Preset | 'auto' | undefined;
  if (preset !== undefined && preset !== 'auto' && !PRESETS.includes(preset)) {
    throw new ConfigError(
      `--preset must be one of ${PRESETS.join(', ')}, auto, found ${JSON.stringify(preset)}`,
    );
  }
  const estimator = values.estimator as CheckEstimator | undefined;
  if (estimator !== undefined && !CHECK_ESTIMATORS.includes(estimator)) {
    throw new ConfigError(
      `--estimator must be one of ${CHECK_ESTIMATORS.join(', ')}, found ${JSON.stringify(estimator)}`,
    );
  }
  const scale = values.scale as CheckOptions['scale'];
  if (scale !== undefined && !['group', 'batch', 'none'].includes(scale)) {
    throw new ConfigError(`--scale must be group, batch or none, found ${JSON.stringify(scale)}`);
  }
  const options: CheckOptions = {};
  if (preset) options.preset = preset;
  if (estimator) options.estimator = estimator;
  if (values['no-std-normalization']) options.stdNormalization = false;
  if (values['per-rollout']) options.perRollout = true;
  if (scale) options.scale = scale;
  const groupSize = number('group-size', values['group-size']);
  if (groupSize !== undefined) options.groupSize = groupSize;
  if (values['reward-key']) options.rewardKey = values['reward-key'];
  const klCoef = number('kl-coef', values['kl-coef']);
  if (klCoef !== undefined) options.klCoef = klCoef;
  const opdKlCoef = number('opd-kl-coef', values['opd-kl-coef']);
  if (opdKlCoef !== undefined) options.opdKlCoef = opdKlCoef;
  if (values['normalize-advantages']) options.normalizeAdvantages = true;
  if (values['no-normalize-advantages']) options.normalizeAdvantages = false;
  const atol = number('atol', values.atol);
  const rtol = number('rtol', values.rtol);
  if (atol !== undefined || rtol !== undefined) {
    options.tolerance = {
      ...(atol !== undefined ? { abs: atol } : {}),
      ...(rtol !== undefined ? { rel: rtol } : {}),
    };
  }
  return { rolloutPath, trainPath, options, json: values.json ?? false };
}

const g = (x: number) =>
  x === 0 ? '0' : Math.abs(x) >= 1e-3 && Math.abs(x) < 1e4 ? x.toFixed(6) : x.toExponential(2);

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

function render(report: CheckReport, rolloutPath: string | undefined, trainPath: string): string {
  const { summary: s, tolerance: t } = report;
  const out: string[] = [];
  out.push(`vime-grpo check  ${rolloutPath ? `${rolloutPath}  ` : ''}${trainPath}`);
  out.push(
    `rollout ${report.rolloutId ?? '-'}: ${s.samples} samples, ${s.tokens} tokens, preset ${report.preset}, estimator ${report.estimator}`,
  );
  out.push('');
  out.push(
    table([
      ['group', 'size', 'mean', 'std', 'note'],
      ...report.groups.map((gr) => [
        String(gr.key),
        String(gr.size),
        g(gr.mean),
        g(gr.std),
        gr.zeroVariance ? 'zero variance: no signal' : '',
      ]),
    ]),
  );
  out.push('');
  out.push(
    table([
      ['pos', 'group', 'raw', 'reward', 'trainer', 'tokens', 'max|err|', 'bit-exact', 'status'],
      ...report.samples.map((x) => [
        String(x.rolloutPosition),
        String(x.group),
        g(x.rawReward),
        g(x.reward.expected),
        x.reward.trainer === null ? '-' : g(x.reward.trainer),
        String(x.tokens),
        g(x.maxAbsError),
        `${x.bitExactTokens}/${x.tokens}`,
        x.ok
          ? 'ok'
          : x.firstMismatch
            ? `MISMATCH at token ${x.firstMismatch.token}: expected ${x.firstMismatch.expected}, trainer ${x.firstMismatch.actual} (mask ${x.firstMismatch.lossMask})`
            : `MISMATCH in the scalar reward: expected ${x.reward.expected}, trainer ${x.reward.trainer}`,
      ]),
    ]),
  );
  out.push('');
  for (const w of report.warnings) out.push(`warning: ${w}`);
  if (report.auto) {
    const { tried, matches, closest } = report.auto;
    if (matches.length === 0) {
      out.push(`auto: none of the ${tried} known conventions reproduces the trainer`);
      if (closest)
        out.push(
          `  closest: ${closest.name} (${closest.mismatchedSamples} samples differ)  ${closest.flags}`,
        );
    } else {
      out.push(`auto: ${matches.length} of ${tried} conventions reproduce the trainer, best first:`);
      // Equally exact conventions share a rank: the dump cannot tell them apart.
      const rank = (i: number) =>
        matches.findIndex(
          (m) => m.bitExactTokens === matches[i]!.bitExactTokens && m.maxAbsError === matches[i]!.maxAbsError,
        ) + 1;
      out.push(
        table(
          matches.map((m, i) => [
            `  ${rank(i)}.`,
            m.name,
            `${m.bitExactTokens}/${m.tokens} bit-exact`,
            `max|err| ${g(m.maxAbsError)}`,
            m.flags,
          ]),
        ),
      );
      const tied = matches.filter((_, i) => rank(i) === 1).length;
      if (tied > 1)
        out.push(
          `  the first ${tied} give identical values on this batch: its rewards and masks cannot tell them apart`,
        );
    }
  }
  if (report.verdict === 'match') {
    const as = report.auto?.matches[0] ? ` as ${report.auto.matches[0].name}` : '';
    out.push(
      `verdict: MATCH${as} — every token within ${t.abs.toExponential()} + ${t.rel.toExponential()}·|e| (max |err| ${g(s.maxAbsError)}; ${s.bitExactTokens}/${s.tokens} tokens bit-exact)`,
    );
  } else {
    out.push(
      `verdict: MISMATCH — ${s.mismatchedSamples} of ${s.samples} samples differ beyond ${t.abs.toExponential()} + ${t.rel.toExponential()}·|e|`,
    );
    for (const h of report.hints) out.push(`  hint: ${h}`);
  }
  return `${out.join('\n')}\n`;
}
