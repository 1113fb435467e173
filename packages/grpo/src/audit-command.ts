/** `vime-grpo audit`: the token audit of a training batch against the proxy's captured-turn log. */
import { readFileSync } from 'node:fs';
import { ConfigError } from '@vime/core';
import { type Command, EXIT, parseFlags, UsageError } from '@vime/core/utils';
import { auditTokens, type TokenAuditReport } from './audit/audit.js';
import { readAuditBatch, readTurnLog } from './audit/audit-input.js';

const AUDIT_HELP = `Usage: vime-grpo audit <batch.jsonl> <turns.jsonl> [--json]

Check that every trained span of a batch (slime Sample.to_dict() rows: JSON lines, a JSON array, or
{"samples": [...]}) maps to exactly one captured turn of the proxy's turn log (JSON lines of
capturedTurnRecord), with identical token ids, log probs and sampler replay slices, and that every
captured turn of the batch's sessions is trained once.

options:
  --json   print the report as JSON

Exit codes: 0 the batch is what was captured, 3 it is not (the report names the sample and token),
2 an input is unreadable or malformed, or a flag is wrong.`;

export const auditCommand: Command = {
  name: 'audit',
  synopsis: 'audit <batch.jsonl> <turns.jsonl>',
  summary: "check a batch's trained tokens against the captured turns",
  help: AUDIT_HELP,
  async run(args, io) {
    const { values, positionals } = parseFlags('vime-grpo audit', args, { json: { type: 'boolean' } });
    if (positionals.length !== 2) {
      throw new UsageError(
        `audit needs <batch.jsonl> <turns.jsonl>, found ${positionals.length} file(s); see \`vime-grpo audit --help\``,
      );
    }
    const files: [string, string] = [positionals[0]!, positionals[1]!];
    const batch = readAuditBatch(read(files[0]), files[0]);
    const turns = readTurnLog(read(files[1]), files[1]);
    const report = auditTokens(batch, turns);
    io.stdout(values.json ? `${JSON.stringify(report, null, 2)}\n` : render(report, files));
    return report.verdict === 'pass' ? EXIT.ok : EXIT.checks;
  },
};

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
