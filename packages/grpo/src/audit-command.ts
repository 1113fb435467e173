/** `vime-grpo audit`: the token audit of a training batch against the proxy's captured-turn log. */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError, VimeError } from '@vime/core';
import { auditTokens, type TokenAuditReport } from './audit/audit.js';
import { readAuditBatch, readTurnLog } from './audit/audit-input.js';

export const AUDIT_USAGE = `usage: vime-grpo audit <batch.jsonl> <turns.jsonl> [--json]

Check that every trained span of a batch (slime Sample.to_dict() rows: JSON lines, a JSON array, or
{"samples": [...]}) maps to exactly one captured turn of the proxy's turn log (JSON lines of
capturedTurnRecord), with identical token ids, log probs and sampler replay slices, and that every
captured turn of the batch's sessions is trained once.

options:
  --json   print the report as JSON

exit status: 0 the batch is what was captured, 1 it is not (the report names the sample and token),
2 an input is unreadable or malformed.
`;

/** Where the command writes (the `Io` of `vime-grpo`'s `main`). */
interface AuditIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

export function auditMain(argv: string[], io: AuditIo): number {
  let files: [string, string];
  let json: boolean;
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
    });
    if (values.help) {
      io.stdout.write(AUDIT_USAGE);
      return 0;
    }
    if (positionals.length !== 2) {
      throw new ConfigError(`audit needs <batch.jsonl> <turns.jsonl>, found ${positionals.length} file(s)`);
    }
    files = [positionals[0]!, positionals[1]!];
    json = values.json ?? false;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? '';
    if (!ConfigError.isInstance(error) && !code.startsWith('ERR_PARSE_ARGS')) throw error;
    io.stderr.write(`vime-grpo audit: ${(error as Error).message}\n\n${AUDIT_USAGE}`);
    return 2;
  }
  let report: TokenAuditReport;
  try {
    const batch = readAuditBatch(read(files[0]), files[0]);
    const turns = readTurnLog(read(files[1]), files[1]);
    report = auditTokens(batch, turns);
  } catch (error) {
    if (!VimeError.isInstance(error)) throw error;
    io.stderr.write(`vime-grpo audit: ${error.message}\n`);
    return 2;
  }
  io.stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : render(report, files));
  return report.verdict === 'pass' ? 0 : 1;
}

function read(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(`cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? error}`, {
      cause: error,
    });
  }
}

function render(report: TokenAuditReport, files: [string, string]): string {
  const out = [`vime-grpo audit  ${files[0]}  ${files[1]}`];
  const { totals: t, turns } = report;
  out.push(
    `${report.samples.length} samples, ${t.trainedTokens} trained tokens; ${turns.inBatchSessions} captured turns of their sessions (${t.sampledTokens} sampled tokens), ${turns.matched} matched`,
  );
  out.push('');
  for (const s of report.samples) {
    const id = `sample ${s.position}${s.index !== null ? ` (index ${s.index})` : ''}${s.sessionId !== null ? ` session ${JSON.stringify(s.sessionId)}` : ''}`;
    const d = s.firstDifference;
    if (s.ok) {
      out.push(
        `${id}: ok, ${s.trainedTokens} trained tokens from ${s.turns.length} turns${s.realignedTokens ? ` (${s.realignedTokens} realigned)` : ''}`,
      );
    } else if (d) {
      out.push(
        `${id}: FAIL at token ${d.token} (tokens[${d.position}]) ${d.field}: ${d.message}; expected ${d.expected}, found ${d.found}`,
      );
    }
  }
  for (const p of report.problems) out.push(`problem: ${p}`);
  out.push('');
  const failed = report.samples.filter((s) => !s.ok).length;
  out.push(
    report.verdict === 'pass'
      ? `verdict: PASS — every trained token is a captured token, with its log prob and nucleus`
      : `verdict: FAIL — ${failed} of ${report.samples.length} samples differ from the capture${report.problems.length ? `, ${report.problems.length} batch problem(s)` : ''}`,
  );
  return `${out.join('\n')}\n`;
}
