#!/usr/bin/env node
/**
 * `vime-metrics`: turn a run's trainer and engine logs (or live engine scrapes) into a JSON run record
 * and a self-contained HTML report, and print a summary with sparklines.
 */
import { createReadStream, mkdirSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { VimeError } from '@vime/core';
import { renderHtmlReport, renderTerminalReport } from './html.js';
import { scrapeEngines } from './prometheus.js';
import { type EngineInput, runReport } from './report.js';
import type { SaturationPoint } from './saturation.js';
import { SglangDecodeLogParser } from './sglang-log.js';
import { parseSlimePerfLog } from './slime-perf.js';

const HELP = `Usage: vime-metrics [options]

Reads a run's logs (or scrapes engines) and writes a JSON run record and an HTML report.

  --trainer-log FILE         slime trainer log (\`ray job logs\` / \`sky jobs logs\` output)
  --engine-log [NAME=]FILE   SGLang engine log with "Decode batch" lines (repeat per engine)
  --scrape [NAME=]URL        engine Prometheus endpoint, e.g. http://host:30000/metrics (repeat)
  --duration DURATION        how long to scrape (default 60s; Ctrl-C stops early)
  --interval DURATION        time between scrapes (default 5s)
  --mode sync|async          run mode recorded in the report
  --name NAME                run name (default <mode>_<N>eng)
  --json FILE                JSON output (default vime-metrics.json)
  --html FILE                HTML output (default vime-metrics.html)
  --quiet                    print only the output paths
  -h, --help                 show this help

Durations: 500ms, 30s, 5m, 1h (a bare number is seconds).
`;

class UsageError extends Error {}

function duration(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new UsageError(`${flag}: cannot read "${text}" as a duration; use e.g. 30s, 5m or 500ms`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? 's']!;
  return Number(m[1]) * unit;
}

function named(values: string[], prefix: string): Array<{ name: string; target: string }> {
  return values.map((v, i) => {
    const eq = v.indexOf('=');
    const looksNamed = eq > 0 && !v.slice(0, eq).includes('/') && !v.slice(0, eq).includes(':');
    return looksNamed
      ? { name: v.slice(0, eq), target: v.slice(eq + 1) }
      : { name: `${prefix}${i}`, target: v };
  });
}

async function readEngineLog(path: string): Promise<SaturationPoint[]> {
  const parser = new SglangDecodeLogParser();
  const stream = createReadStream(path, { encoding: 'utf8', highWaterMark: 1 << 20 });
  for await (const chunk of stream) parser.push(chunk as string);
  const result = parser.end();
  if (result.samples.length === 0) {
    throw new UsageError(
      `${path}: no "Decode batch" lines among ${result.lines} lines (${result.malformed} malformed); is this an SGLang engine log?`,
    );
  }
  return result.samples;
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      'trainer-log': { type: 'string' },
      'engine-log': { type: 'string', multiple: true, default: [] },
      scrape: { type: 'string', multiple: true, default: [] },
      duration: { type: 'string', default: '60s' },
      interval: { type: 'string', default: '5s' },
      mode: { type: 'string' },
      name: { type: 'string' },
      json: { type: 'string', default: 'vime-metrics.json' },
      html: { type: 'string', default: 'vime-metrics.html' },
      quiet: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const engineLogs = named(values['engine-log'], 'eng');
  const scrapes = named(values.scrape, `eng`);
  if (!values['trainer-log'] && engineLogs.length === 0 && scrapes.length === 0) {
    throw new UsageError('nothing to read: pass --trainer-log, --engine-log or --scrape (see --help)');
  }
  const say = (line: string) => {
    if (!values.quiet) process.stderr.write(`${line}\n`);
  };

  const engines: EngineInput[] = [];
  for (const { name, target } of engineLogs) {
    const points = await readEngineLog(target);
    say(`${name}: ${points.length} decode-batch readings from ${target}`);
    engines.push({ name, points });
  }
  if (scrapes.length > 0) {
    const ctrl = new AbortController();
    const stop = () => ctrl.abort();
    process.once('SIGINT', stop);
    const durationMs = duration(values.duration, '--duration');
    say(
      `scraping ${scrapes.length} engine(s) for ${values.duration} every ${values.interval} (Ctrl-C to stop)`,
    );
    const series = await scrapeEngines(
      scrapes.map((s) => s.target),
      { intervalMs: duration(values.interval, '--interval'), durationMs, signal: ctrl.signal },
    );
    process.off('SIGINT', stop);
    series.forEach((s, i) => {
      const points = s.scrapes
        .filter((x) => x.snapshot.running !== null)
        .map((x) => ({
          t: x.t,
          running: x.snapshot.running ?? 0,
          queued: x.snapshot.queued ?? 0,
          kvUsage: x.snapshot.kvUsage ?? 0,
        }));
      say(
        `${scrapes[i]!.name}: ${points.length} scrapes of ${s.url}, ${s.errors.length} failed${s.errors[0] ? ` (${s.errors[0].message})` : ''}`,
      );
      engines.push({ name: scrapes[i]!.name, points, scrapes: s.scrapes });
    });
  }
  const perf = values['trainer-log']
    ? parseSlimePerfLog(await readFile(values['trainer-log'], 'utf8'))
    : undefined;
  if (perf) {
    say(
      `trainer: ${perf.steps.length} steps from ${perf.lines} lines (${perf.malformed} malformed perf lines)`,
    );
  }

  const record = runReport({
    ...(values.name ? { name: values.name } : {}),
    ...(values.mode ? { mode: values.mode } : {}),
    engines,
    ...(perf ? { perf } : {}),
  });
  const jsonPath = resolve(values.json);
  const htmlPath = resolve(values.html);
  mkdirSync(dirname(jsonPath), { recursive: true });
  mkdirSync(dirname(htmlPath), { recursive: true });
  writeFileSync(jsonPath, `${JSON.stringify(record, null, 2)}\n`);
  writeFileSync(htmlPath, renderHtmlReport(record));
  if (!values.quiet) process.stdout.write(`${renderTerminalReport(record)}\n`);
  process.stdout.write(`wrote ${jsonPath}\nwrote ${htmlPath}\n`);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const known =
      error instanceof UsageError || VimeError.isInstance(error) || (error as NodeJS.ErrnoException).code;
    process.stderr.write(`vime-metrics: ${(error as Error).message}\n`);
    if (!known) process.stderr.write(`${(error as Error).stack}\n`);
    process.exit(2);
  },
);
