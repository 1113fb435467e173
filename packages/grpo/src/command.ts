/**
 * The `vime-grpo` command line: `check` compares a slime trainer's dumped advantages with a recomputation;
 * `audit` checks a batch's trained tokens against the captured turns. `main` takes argv and an IO object
 * and returns the exit code, so tests run it in-process; `src/cli.ts` binds it to the process.
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from '@vime/core';
import {
  type CliIo,
  type CliProgram,
  type Command,
  EXIT,
  finiteNumber,
  oneOf,
  parseFlags,
  positiveInt,
  runCli,
  runProgram,
  UsageError,
} from '@vime/core/utils';
import { auditCommand } from './audit-command.js';
import { CHECK_ESTIMATORS, type CheckOptions, type CheckReport, checkAgainstTrainer } from './check/check.js';
import { readRolloutDump, readTrainDump } from './check/dump.js';
import { PRESETS } from './estimators/presets.js';

const CHECK_HELP = `Usage: vime-grpo check <rollout.pt> <train.pt> [options]
       vime-grpo check <train.pt> --group-size N [options]

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

Exit codes: 0 the trainer agrees, 3 it does not (the report says where), 2 an input is unreadable
or not a slime dump, or a flag is wrong.`;

const CHECK_FLAGS = {
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
} as const;

const checkCommand: Command = {
  name: 'check',
  synopsis: 'check <rollout.pt> <train.pt>',
  summary: "compare a slime trainer's dumped advantages with a recomputation",
  help: CHECK_HELP,
  async run(args, io) {
    const { rolloutPath, trainPath, options, json } = parseCheck(args);
    const trainDump = readTrainDump(read(trainPath), trainPath);
    const report = rolloutPath
      ? checkAgainstTrainer(
          { rolloutDump: readRolloutDump(read(rolloutPath), rolloutPath), trainDump },
          options,
        )
      : checkAgainstTrainer({ trainDump }, options);
    io.stdout(json ? `${JSON.stringify(report, null, 2)}\n` : render(report, rolloutPath, trainPath));
    return report.verdict === 'match' ? EXIT.ok : EXIT.checks;
  },
};

export const GRPO: CliProgram = {
  name: 'vime-grpo',
  summary: "check a trainer's advantages and a batch's tokens against what was sampled",
  commands: [checkCommand, auditCommand],
  exitCodes: [
    [0, 'the trainer agrees (check), the batch is what was captured (audit)'],
    [2, 'an input is unreadable or malformed, or a flag is wrong'],
    [3, 'it does not: the report says where'],
  ],
};

/** Run `vime-grpo` with `argv`; never throws. A stack trace is printed only for a bug. */
export function main(argv: string[], io: CliIo): Promise<number> {
  return runCli('vime-grpo', (args, cliIo) => runProgram(GRPO, args, cliIo), { argv, io });
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

function parseCheck(args: string[]) {
  const { values, positionals: files } = parseFlags('vime-grpo check', args, CHECK_FLAGS, {
    maxPositionals: 2,
  });
  if (files.length === 0)
    throw new UsageError('check needs <rollout.pt> <train.pt> (or <train.pt> with --group-size)');
  const [rolloutPath, trainPath] = files.length === 2 ? [files[0], files[1]!] : [undefined, files[0]!];
  if (!rolloutPath && values['group-size'] === undefined) {
    throw new UsageError("with only a train dump, pass --group-size (the run's --n-samples-per-prompt)");
  }
  return { rolloutPath, trainPath, options: checkOptions(values), json: values.json ?? false };
}

type CheckValues = ReturnType<typeof parseFlags<typeof CHECK_FLAGS>>['values'];

/** The check's options from its flags, each value checked and named by its flag. */
function checkOptions(values: CheckValues): CheckOptions {
  const preset = oneOf(values.preset, '--preset', [...PRESETS, 'auto'] as const);
  const estimator = oneOf(values.estimator, '--estimator', CHECK_ESTIMATORS);
  const scale = oneOf(values.scale, '--scale', ['group', 'batch', 'none'] as const);
  const options: CheckOptions = {};
  if (preset) options.preset = preset;
  if (estimator) options.estimator = estimator;
  if (values['no-std-normalization']) options.stdNormalization = false;
  if (values['per-rollout']) options.perRollout = true;
  if (scale) options.scale = scale;
  const groupSize = positiveInt(values['group-size'], '--group-size');
  if (groupSize !== undefined) options.groupSize = groupSize;
  if (values['reward-key']) options.rewardKey = values['reward-key'];
  const klCoef = finiteNumber(values['kl-coef'], '--kl-coef');
  if (klCoef !== undefined) options.klCoef = klCoef;
  const opdKlCoef = finiteNumber(values['opd-kl-coef'], '--opd-kl-coef');
  if (opdKlCoef !== undefined) options.opdKlCoef = opdKlCoef;
  if (values['normalize-advantages']) options.normalizeAdvantages = true;
  if (values['no-normalize-advantages']) options.normalizeAdvantages = false;
  const atol = finiteNumber(values.atol, '--atol', 0);
  const rtol = finiteNumber(values.rtol, '--rtol', 0);
  if (atol !== undefined || rtol !== undefined) {
    options.tolerance = {
      ...(atol !== undefined ? { abs: atol } : {}),
      ...(rtol !== undefined ? { rel: rtol } : {}),
    };
  }
  return options;
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
