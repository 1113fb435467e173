/**
 * The processes of the `GroupQueue` SIGKILL test (`group-crash.int.test.ts`): a fully async run, killed as
 * a whole process tree at random points and started again on the same directory.
 *
 *   run <dir> <groups> <n> <steps> <perStep>: starts two stand-in engines (a child process: real HTTP
 *     servers on SGLang's wire with a scripted policy, not a model), then at once: a producer creating
 *     one group of `n` siblings per task (keyed, so a restart does not create it again), four workers
 *     leasing groups and running each sibling as two engine turns (a partial saved after the first, the
 *     next attempt continues from it) and a grade, and a trainer taking `perStep` groups per step,
 *     writing what it trained on to <dir>/trained/<step>.json, publishing weight version `step` to the
 *     engines and committing. Prints `ready` once the queue is open, `working` once the engines are up,
 *     and `done` with the queue's counters at the end.
 *   engines: two stand-in engines; prints their URLs; a stdin line `v <n>` sets their weight version.
 *
 * <dir>/events.log lists every grader call and every receipt (`call|receipt <group>/<slot> <attempt>`).
 * The grader keeps every reward it computed in <dir>/grader.log (appended and flushed before it
 * returns), keyed by sibling: a grade is computed once, and a call for a sibling graded already (a
 * worker killed between the grade and its submit) returns the kept reward and is counted as such.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { appendFile, mkdir, open, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { qwen3 } from './tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import { createSample, type Sample } from '../sample.js';
import { startStandInEngine } from '../standin/engine.js';
import type { SiblingAttempt } from '../queue/group-types.js';
import { GroupQueue } from '../queue/groups.js';

const [mode, ...args] = process.argv.slice(2);
process.on('exit', (code) => process.stderr.write(`${mode} exits with ${code}\n`));

async function enginesMain(): Promise<void> {
  const tokenizer = await qwen3();
  const engines = await Promise.all(
    [0, 1].map(() =>
      startStandInEngine({
        tokenizer,
        policy: (r) => `step ${r.requestIndex % 5}: edit file ${r.inputIds.length % 7}`,
        weightVersion: '0',
      }),
    ),
  );
  createInterface({ input: process.stdin }).on('line', (line) => {
    const m = /^v (\d+)$/.exec(line.trim());
    if (m) for (const e of engines) e.setWeightVersion(m[1]!);
  });
  process.stdout.write(`${engines.map((e) => e.url).join(' ')}\n`);
}

/** One child process serving both engines (one tokenizer load per restart, on a 2-core machine). */
function startEngines(): Promise<{ child: ChildProcess; urls: string[] }> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--conditions=@vime/source', fileURLToPath(import.meta.url), 'engines'],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  // Held open until the engines answer: nothing else here keeps the process alive meanwhile.
  const keepAlive = setInterval(() => {}, 1000);
  return new Promise<{ child: ChildProcess; urls: string[] }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the engines did not start within 120 s')), 120_000);
    child.once('error', reject);
    child.once('exit', (code, signal) => reject(new Error(`the engines exited with ${code ?? signal}`)));
    createInterface({ input: child.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      resolve({ child, urls: line.split(' ') });
    });
  }).finally(() => clearInterval(keepAlive));
}

const hash = (s: Sample) => createHash('sha256').update(s.tokens).digest('hex').slice(0, 16);

async function runMain(): Promise<void> {
  const [dir, groupsArg, nArg, stepsArg, perStepArg] = args as [string, string, string, string, string];
  const [groups, n, steps, perStep] = [groupsArg, nArg, stepsArg, perStepArg].map(Number) as [
    number,
    number,
    number,
    number,
  ];
  const engines = startEngines();
  await mkdir(join(dir, 'trained'), { recursive: true });
  const queue = await GroupQueue.open(join(dir, 'queue'), {
    deadlineMs: 20_000,
    maxLost: 100,
    segmentBytes: 64 << 10,
  });
  process.stdout.write('ready\n');
  const { child, urls } = await engines;
  const clients = urls.map((url) => sglangEngine(url));
  child.stdin!.write(`v ${queue.trainerVersion}\n`);
  process.stdout.write('working\n');
  const graderLog = join(dir, 'grader.log');
  const graded = new Map<string, number>();
  for (const line of (await readFile(graderLog, 'utf8').catch(() => '')).split('\n')) {
    const [key, reward] = line.split(' ');
    if (key && reward !== undefined) graded.set(key, Number(reward));
  }
  const grader = await open(graderLog, 'a');
  const events = join(dir, 'events.log');
  const grade = async (key: string, attempt: number, samples: Sample[]): Promise<number> => {
    await appendFile(events, `call ${key} ${attempt}\n`);
    const kept = graded.get(key);
    if (kept !== undefined) return kept;
    const reward = samples[0]!.tokens.reduce((a, b) => a + b, 0) % 2;
    await grader.write(`${key} ${reward}\n`);
    await grader.datasync();
    graded.set(key, reward);
    return reward;
  };

  const producer = (async () => {
    for (let i = 0; i < groups; i++) await queue.create({ n, key: `task-${i}`, payload: { task: i } });
  })();

  const turn = async (a: SiblingAttempt, prompt: Int32Array) => {
    const engine = clients[(a.group + a.slot) % 2]!;
    const r = await engine.generate(
      { inputIds: prompt, sampling: { maxTokens: 16, temperature: 0 } },
      { signal: a.signal },
    );
    return { ids: r.outputIds, logprobs: r.logprobs, version: Number(r.weightVersion ?? 0) };
  };
  const sibling = async (a: SiblingAttempt, task: number) => {
    // Small ids are plain byte-level tokens of the real vocabulary: a prompt without a tokenizer here.
    const prompt = Int32Array.from({ length: 24 }, (_, k) => 10 + ((task * 31 + a.slot * 7 + k * 13) % 200));
    let first = a.partial?.samples[0];
    if (!first) {
      const t = await turn(a, prompt);
      first = createSample({
        tokens: Int32Array.from([...prompt, ...t.ids]),
        response_length: t.ids.length,
        loss_mask: Array(t.ids.length).fill(1),
        rollout_log_probs: t.logprobs,
        weight_versions: [String(t.version)],
        metadata: { weight_version_spans: [[t.version, t.ids.length]] },
      });
      await queue.savePartial(a, { samples: [first], state: { turns: 1 } });
    }
    const t = await turn(a, first.tokens);
    const spans = [
      ...(first.metadata.weight_version_spans as Array<[number, number]>),
      [t.version, t.ids.length],
    ];
    const sample = createSample({
      tokens: Int32Array.from([...first.tokens, ...t.ids]),
      response_length: first.response_length + t.ids.length,
      loss_mask: Array(first.response_length + t.ids.length).fill(1),
      rollout_log_probs: Float32Array.from([...(first.rollout_log_probs ?? []), ...t.logprobs]),
      weight_versions: [...new Set(spans.map(([v]) => String(v)))],
      status: 'completed',
      metadata: { weight_version_spans: spans },
    });
    const reward = await grade(`${a.group}/${a.slot}`, a.attempt, [sample]);
    const receipt = await queue.submit(a, { reward, samples: [sample] });
    // A reply lost on the way back: asking again gives the same receipt and writes nothing.
    const again = await queue.submit(a, { reward, samples: [sample] });
    if (again.seq !== receipt.seq || !again.duplicate) throw new Error(`receipt changed for ${receipt.id}`);
    await appendFile(events, `receipt ${a.group}/${a.slot} ${a.attempt}\n`);
    // Progress for the test, which kills after a random number of these (wall time varies with load).
    process.stdout.write('submitted\n');
  };
  let finished = false;
  const worker = async (w: number) => {
    while (!finished) {
      const lease = await queue
        .lease({ worker: `w${w}`, signal: AbortSignal.timeout(500) })
        .catch(() => undefined);
      if (!lease) continue;
      await Promise.all(
        lease.attempts.map((a) =>
          sibling(a, (lease.payload as { task: number }).task).catch(
            async (error: { code?: string | undefined; message?: string | undefined }) => {
              if (error.code === 'attempt_stale' || a.signal.aborted) return;
              await queue.fail(a, { code: String(error.code ?? 'error'), message: String(error.message) });
            },
          ),
        ),
      );
    }
  };
  const workers = [0, 1, 2, 3].map(worker);

  for (let step = queue.trainerStep + 1; step <= steps; step++) {
    const batch = await queue.take(step, { groups: perStep });
    const record = {
      step,
      trainerVersion: batch.trainerVersion,
      groups: batch.groups.map((g) => ({
        group: g.group,
        lag: g.lag,
        span: g.span,
        siblings: g.siblings.map((s) => [s.attempt, s.reward, hash(s.samples[0]!)]),
      })),
    };
    const path = join(dir, 'trained', `${step}.json`);
    const before = await readFile(path, 'utf8').catch(() => undefined);
    const text = JSON.stringify(record);
    // Trained before the kill (not committed): it must be exactly the same batch.
    if (before !== undefined && before !== text)
      await writeFile(join(dir, 'trained', `${step}.changed`), before);
    await writeFile(`${path}.tmp`, text);
    await rename(`${path}.tmp`, path);
    child.stdin!.write(`v ${step}\n`);
    await queue.commit(step, { version: step });
  }
  finished = true;
  await producer;
  await Promise.all(workers);
  const stats = queue.stats;
  await queue.close();
  await grader.close();
  child.kill();
  process.stdout.write(`done ${JSON.stringify(stats)}\n`);
}

if (mode === 'engines') await enginesMain();
else if (mode === 'run') await runMain();
else {
  process.stderr.write(
    `unknown mode ${mode}\n${readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n')[1]}\n`,
  );
  process.exit(2);
}
