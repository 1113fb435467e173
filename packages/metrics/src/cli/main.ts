/**
 * `vime-metrics`: turn a run's trainer and engine logs (or live engine scrapes) into a JSON run record
 * and a self-contained HTML report, and print a summary with sparklines. Every input is checked before
 * any work starts, and a report is written only from inputs that held data. `main` takes argv and an IO
 * object and returns the exit code; `src/cli.ts` binds it to the process.
 */
import { createReadStream } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { ConfigError, EngineError } from '@vime/core';
import {
  type CliIo,
  closest,
  didYouMean,
  EXIT,
  ensureDirectory,
  oneOf,
  parseDuration,
  parseFlags,
  pathError,
  readTextFile,
  runCli,
  sleep,
  UsageError,
  wantsHelp,
} from '@vime/core/utils';
import { renderHtmlReport } from '../html.js';
import { loadPointsOf, type ScrapeSeries } from '../prometheus.js';
import { runReport } from '../report.js';
import type { EngineInput } from '../report-input.js';
import type { SaturationPoint } from '../saturation.js';
import { type PrometheusScrape, scrapeEngines, scrapePrometheus } from '../scrape/prometheus.js';
import { SglangDecodeLogParser } from '../sglang-log.js';
import { agentResults, parseSlimePerfLog, type SlimePerfLog } from '../slime-perf.js';
import { renderTerminalReport } from '../terminal.js';
import { type RolloutShape, rolloutShapeOf } from '../training.js';
import { COMPARE_HELP, compareCommand } from './compare.js';
import { readRun } from './run-folder.js';

const HELP = `Usage: vime-metrics [options]
       vime-metrics compare RUN RUN [RUN...]   (two or more runs on one page; see compare --help)

Reads a run (a folder vime-loop wrote, its metrics file, or slime's logs) or scrapes engines, and writes
a JSON run record and an HTML report.

  --run RUN                  a folder vime-loop wrote (its --out), or its metrics.jsonl
  --batch STEP=FILE          a step's training rows (steps/<n>.msgpack) kept outside the run folder (repeat)
  --trainer-log FILE         slime trainer log (\`ray job logs\` / \`sky jobs logs\` output)
  --engine-log [NAME=]FILE   SGLang engine log with "Decode batch" lines (repeat per engine)
  --scrape [NAME=]URL        engine Prometheus endpoint, e.g. http://host:30000/metrics (repeat)
  --duration DURATION        how long to scrape (default 60s; Ctrl-C stops early)
  --interval DURATION        time between scrapes (default 5s, at least 100ms)
  --mode sync|async          run mode recorded in the report
  --name NAME                run name (default <mode>_<N>eng)
  --json FILE                JSON output (default vime-metrics.json)
  --html FILE                HTML output (default vime-metrics.html)
  --quiet                    print only the output paths
  -h, --help                 show this help

Durations: 500ms, 30s, 5m, 1h (a bare number is seconds).

Exit codes:
  0  the report was written
  1  a scrape target never answered, or the report could not be written
  2  invalid usage or input: unknown flag, bad value, a log that cannot be read or holds no data
`;

const MODES = ['sync', 'async'] as const;
/** Closer scrapes measure the scraper, not the engine; zero would scrape in a busy loop. */
const MIN_INTERVAL_MS = 100;

interface Target {
  name: string;
  target: string;
}

function named(values: string[], prefix: string): Target[] {
  return values.map((v, i) => {
    const eq = v.indexOf('=');
    const looksNamed = eq > 0 && !v.slice(0, eq).includes('/') && !v.slice(0, eq).includes(':');
    return looksNamed
      ? { name: v.slice(0, eq), target: v.slice(eq + 1) }
      : { name: `${prefix}${i}`, target: v };
  });
}

function checkScrapeUrl(target: string): void {
  let url: URL | undefined;
  try {
    url = new URL(target);
  } catch {
    // reported below
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
    throw new ConfigError(
      `--scrape ${JSON.stringify(target)} is not an http(s) URL; write it as http://HOST:PORT/metrics`,
    );
  }
}

async function readEngineLog(path: string, cwd: string): Promise<SaturationPoint[]> {
  const parser = new SglangDecodeLogParser();
  try {
    const stream = createReadStream(resolve(cwd, path), { encoding: 'utf8', highWaterMark: 1 << 20 });
    for await (const chunk of stream) parser.push(chunk as string);
  } catch (error) {
    throw pathError(error, '--engine-log', path, 'read it');
  }
  const result = parser.end();
  if (result.samples.length === 0) {
    throw new ConfigError(
      `--engine-log ${path}: no "Decode batch" lines among ${result.lines} lines (${result.malformed} malformed); is this an SGLang engine log?`,
    );
  }
  return result.samples;
}

async function readTrainerLog(path: string, cwd: string): Promise<SlimePerfLog> {
  const perf = parseSlimePerfLog(await readTextFile(path, '--trainer-log', { cwd }));
  if (perf.steps.length === 0 && perf.rollouts.completed + perf.rollouts.aborted === 0) {
    throw new ConfigError(
      `--trainer-log ${path}: no "perf N:" step lines and no rollout lines among ${perf.lines} lines; is this a slime trainer log (\`ray job logs\` output)?`,
    );
  }
  return perf;
}

/**
 * The first scrape of each target, taken alone so that a dead or wrong URL fails now, not after
 * --duration. Returns each target's reading.
 */
async function probe(scrapes: Target[], signal: AbortSignal | undefined): Promise<ScrapeSeries['scrapes']> {
  const probes = await Promise.allSettled(scrapes.map((s) => scrapePrometheus(s.target, { signal })));
  signal?.throwIfAborted();
  const down = probes.flatMap((p, i) =>
    p.status === 'rejected' ? [`--scrape ${scrapes[i]!.target}: ${(p.reason as Error).message}`] : [],
  );
  if (down.length) throw new EngineError(down.join('; '));
  const notEngines = probes.flatMap((p, i) =>
    p.status === 'fulfilled' && p.value.snapshot.running === null ? [scrapes[i]!.target] : [],
  );
  if (notEngines.length) {
    throw new ConfigError(
      `--scrape ${notEngines.join(', ')}: answered without engine gauges (running requests); is it an SGLang (--enable-metrics) or vLLM /metrics endpoint?`,
    );
  }
  return probes.map((p) => {
    const { t, snapshot } = (p as PromiseFulfilledResult<PrometheusScrape>).value;
    return { t, snapshot };
  });
}

/**
 * The rest of each target's series, one interval after the probe's reading (which opens it). A target
 * that never answered again fails the run rather than report one reading as the run.
 */
async function scrapeSeries(
  scrapes: Target[],
  first: ScrapeSeries['scrapes'],
  options: { intervalMs: number; durationMs: number; signal: AbortSignal | undefined },
  say: (line: string) => void,
): Promise<EngineInput[]> {
  const { intervalMs, durationMs, signal } = options;
  const started = Date.now();
  const stopped = await sleep(Math.min(intervalMs, durationMs), signal).then(
    () => false,
    () => true,
  );
  const rest = durationMs - (Date.now() - started);
  const later =
    stopped || rest < 0
      ? scrapes.map((s) => ({ url: s.target, scrapes: [], errors: [] }) as ScrapeSeries)
      : await scrapeEngines(
          scrapes.map((s) => s.target),
          { intervalMs, durationMs: rest, signal },
        );
  const series = later.map((s, i) => ({ ...s, scrapes: [first[i]!, ...s.scrapes] }));
  return series.map((s, i) => {
    const points = loadPointsOf(s.scrapes);
    const failed = `${s.errors.length} failed${s.errors[0] ? ` (first: ${s.errors[0].message})` : ''}`;
    if (s.scrapes.length === 1 && s.errors.length > 0) {
      throw new EngineError(
        `--scrape ${s.url}: answered the first scrape, then none of the ${s.errors.length} after it (first error: ${s.errors[0]!.message}); no report written`,
      );
    }
    say(`${scrapes[i]!.name}: ${points.length} scrapes of ${s.url}, ${failed}`);
    return { name: scrapes[i]!.name, points, scrapes: s.scrapes };
  });
}

const FLAGS = {
  run: { type: 'string' },
  batch: { type: 'string', multiple: true, default: [] as string[] },
  'trainer-log': { type: 'string' },
  'engine-log': { type: 'string', multiple: true, default: [] as string[] },
  scrape: { type: 'string', multiple: true, default: [] as string[] },
  duration: { type: 'string', default: '60s' },
  interval: { type: 'string', default: '5s' },
  mode: { type: 'string' },
  name: { type: 'string' },
  json: { type: 'string', default: 'vime-metrics.json' },
  html: { type: 'string', default: 'vime-metrics.html' },
  quiet: { type: 'boolean', default: false },
} as const;

/** Aborting `io.signal` stops a scrape early: the report is written from what was scraped. */
async function run(argv: string[], io: CliIo): Promise<number> {
  if (argv[0] === 'compare') {
    if (wantsHelp(argv)) {
      io.stdout(COMPARE_HELP);
      return EXIT.ok;
    }
    return compareCommand(argv.slice(1), io);
  }
  if (wantsHelp(argv)) {
    io.stdout(HELP);
    return EXIT.ok;
  }
  const command = argv.find((a) => !a.startsWith('-'));
  if (command === argv[0] && command !== undefined && closest(command, COMMANDS)) {
    throw new UsageError(
      `unknown command ${JSON.stringify(command)}${didYouMean(command, COMMANDS)}; see \`vime-metrics --help\``,
    );
  }
  const { values } = parseFlags('vime-metrics', argv, FLAGS, { maxPositionals: 0 });
  const engineLogs = named(values['engine-log'], 'eng');
  const scrapes = named(values.scrape, `eng`);
  if (values.batch.length && !values.run) {
    throw new ConfigError('--batch adds rows to a run: pass the run with --run (see --help)');
  }
  if (!values.run && !values['trainer-log'] && engineLogs.length === 0 && scrapes.length === 0) {
    throw new ConfigError(
      'nothing to read: pass --run, --trainer-log, --engine-log or --scrape (see --help)',
    );
  }
  const batches = batchFlags(values.batch);
  const mode = oneOf(values.mode, '--mode', MODES);
  const durationMs = parseDuration(values.duration, '--duration');
  const intervalMs = parseDuration(values.interval, '--interval');
  if (intervalMs < MIN_INTERVAL_MS) {
    throw new ConfigError(
      `--interval ${values.interval}: scrapes must be at least ${MIN_INTERVAL_MS}ms apart; write e.g. --interval 5s`,
    );
  }
  for (const { target } of scrapes) checkScrapeUrl(target);
  const say = (line: string) => {
    if (!values.quiet) io.stderr(`${line}\n`);
  };

  const outputs: Array<[flag: string, path: string]> = [
    ['--json', values.json],
    ['--html', values.html],
  ];
  const prepareOutputs = async () => {
    for (const [flag, path] of outputs) await ensureDirectory(dirname(path), flag, { cwd: io.cwd });
  };

  // Files first: a bad log fails at once, not after a scrape of --duration.
  const engines: EngineInput[] = [];
  for (const { name, target } of engineLogs) {
    const points = await readEngineLog(target, io.cwd);
    say(`${name}: ${points.length} decode-batch readings from ${target}`);
    engines.push({ name, points });
  }
  const fromRun = values.run ? await readRun(values.run, '--run', io.cwd, batches) : undefined;
  if (fromRun) {
    const f = fromRun.file;
    say(
      `run ${fromRun.label}: ${f.rollouts.length} rollouts and ${f.steps.length} steps from ${f.lines} lines (${f.malformed} unreadable)`,
    );
  }
  const perf = values['trainer-log'] ? await readTrainerLog(values['trainer-log'], io.cwd) : undefined;
  if (perf) {
    say(
      `trainer: ${perf.steps.length} steps from ${perf.lines} lines (${perf.malformed} malformed perf lines)`,
    );
  }

  if (scrapes.length > 0) {
    const first = await probe(scrapes, io.signal);
    await prepareOutputs();
    say(
      `scraping ${scrapes.length} engine(s) for ${values.duration} every ${values.interval} (Ctrl-C to stop)`,
    );
    engines.push(...(await scrapeSeries(scrapes, first, { intervalMs, durationMs, signal: io.signal }, say)));
  }

  const record = runReport({
    ...fromRun?.input,
    ...(values.name ? { name: values.name } : {}),
    ...(mode ? { mode } : {}),
    engines,
    // Decode-batch logs and scrapes are a served engine's own readings, not a stand-in's.
    ...(engines.length
      ? { engineKind: { kind: engineLogs.length ? 'sglang' : 'scraped /metrics', standIn: false } }
      : {}),
    // slime's `[agent]` lines name no prompt group: no zero-variance figure from them.
    ...(perf && !fromRun ? { perf, results: agentResults(perf), shapes: agentShapes(perf) } : {}),
    ...(perf && fromRun ? { perf } : {}),
  });
  const texts = [`${JSON.stringify(record, null, 2)}\n`, renderHtmlReport(record)];
  await prepareOutputs();
  for (const [i, [flag, path]] of outputs.entries()) {
    await writeFile(resolve(io.cwd, path), texts[i]!).catch((error: unknown) => {
      throw pathError(error, flag, path, 'write it');
    });
  }
  if (!values.quiet) io.stdout(`${renderTerminalReport(record)}\n`);
  for (const [, path] of outputs) io.stdout(`wrote ${resolve(io.cwd, path)}\n`);
  return EXIT.ok;
}

const COMMANDS = ['compare'];

/** `--batch STEP=FILE` flags by step; a step that is not a whole number is named. */
function batchFlags(values: string[]): Map<number, string> {
  const out = new Map<number, string>();
  for (const v of values) {
    const m = /^(\d+)=(.+)$/.exec(v);
    if (!m) {
      throw new ConfigError(
        `--batch ${JSON.stringify(v)}: write it as STEP=FILE, e.g. --batch 10=steps/10.msgpack`,
      );
    }
    out.set(Number(m[1]), m[2]!);
  }
  return out;
}

function agentShapes(perf: SlimePerfLog): RolloutShape[] {
  return agentResults(perf).flatMap(({ step, results }) => results.map((r) => rolloutShapeOf(step, r, null)));
}

/** Run `vime-metrics` with `argv`; never throws. A stack trace is printed only for a bug. */
export function main(argv: string[], io: CliIo): Promise<number> {
  return runCli('vime-metrics', run, { argv, io });
}
