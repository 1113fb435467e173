import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSamples, type Sample, type TaskSpec } from '@vime/core';
import { loadTokenizer } from '@vime/core/engine';
import {
  claudeCodeScript,
  codexScript,
  fixOf,
  geminiCliScript,
  oneLineFix,
  opencodeScript,
  piScript,
  qwenCodeScript,
  type Script,
} from '@vime/harness/standin';
import { dockerForTests } from '@vime/sandbox/testing';
import { buildOfflineTaskSet } from '@vime/swe';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { LOOP_CLI, runScript } from '../__fixtures__/run-command.js';
import { bundledTokenizerDir } from '../defaults.js';

declare module 'vitest' {
  export interface ProvidedContext {
    offlineTasksDir: string;
  }
}

function runCli(args: string[], timeoutMs: number, env: Record<string, string> = {}) {
  return runScript(LOOP_CLI, args, { env: { ...process.env, ...env }, timeoutMs });
}

let tmp: string;
let dataset: string;
let badDataset: string;
let tasks: Record<
  'claude-code' | 'codex' | 'qwen-code' | 'pi' | 'opencode' | 'gemini-cli' | 'default',
  TaskSpec
>;

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-harness-agents-'));
  const set = await buildOfflineTaskSet({ dir: inject('offlineTasksDir') });
  const oneLine = set.tasks.filter((t) => oneLineFix(t) !== undefined);
  const claude = oneLine[0]!;
  const codex = oneLine[1]!;
  const qwen = oneLine[2]!;
  const pi = oneLine[3]!;
  const opencode = oneLine[4]!;
  const gemini = oneLine[5]!;
  const other = set.tasks.find((t) => ![claude, codex, qwen, pi, opencode, gemini].includes(t))!;
  tasks = {
    'claude-code': claude,
    codex,
    'qwen-code': qwen,
    pi,
    opencode,
    'gemini-cli': gemini,
    default: other,
  };
  const rows = (await readFile(set.jsonlPath, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const row = (task: TaskSpec) => rows.find((r) => r.instance_id === task.id)!;
  // Next to the published rows, so the set's environments.json applies to this file too.
  const suffix = Math.random().toString(36).slice(2, 8);
  dataset = join(set.dir, `agents-${suffix}.jsonl`);
  badDataset = join(set.dir, `agents-bad-${suffix}.jsonl`);
  const lines = [
    { ...row(claude), agent: 'claude-code' },
    { ...row(codex), agent: 'codex' },
    { ...row(qwen), agent: 'qwen-code' },
    { ...row(pi), agent: 'pi' },
    { ...row(opencode), agent: 'opencode' },
    { ...row(gemini), agent: 'gemini-cli' },
    row(other),
  ];
  await writeFile(dataset, `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  await writeFile(badDataset, `${JSON.stringify({ ...row(claude), agent: 'Claude-Code' })}\n`);
});

afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
  await rm(dataset, { force: true });
  await rm(badDataset, { force: true });
});

interface StepResult {
  taskId: string;
  status: string;
  reward?: number;
  error?: unknown;
}

/** The per-rollout results of a run's first step. */
async function stepResults(out: string): Promise<StepResult[]> {
  return JSON.parse(await readFile(join(out, 'steps', '1.results.json'), 'utf8')) as StepResult[];
}

/** The mask-1 tokens of a rollout's rows, in order, with their log probs. */
function trained(rows: Sample[]): { ids: number[]; logprobs: number[] } {
  const ids: number[] = [];
  const logprobs: number[] = [];
  for (const s of rows) {
    const start = s.tokens.length - s.response_length;
    s.loss_mask!.forEach((m, j) => {
      if (m === 1) {
        ids.push(s.tokens[start + j]!);
        logprobs.push(s.rollout_log_probs![j]!);
      } else expect(s.rollout_log_probs![j]).toBe(0);
    });
  }
  return { ids, logprobs };
}

describe('coding-agent CLI: metadata.agent picks the harness per sample', () => {
  it('a bad --agent or row agent is one line naming it and the choices, exit 2', async () => {
    const flag = await runCli(['--agent', 'claude', '--out', join(tmp, 'bad-flag')], 60_000);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain(
      '--agent: string "claude" is not accepted (did you mean "claude-code"?); write one of "mini-swe-agent", "claude-code", "codex", "qwen-code", "pi", "opencode", "gemini-cli"',
    );
    expect(flag.stderr).not.toMatch(/\n\s+at /);
    const row = await runCli(['--dataset', badDataset, '--out', join(tmp, 'bad-row')], 60_000);
    expect(row.code).toBe(2);
    expect(row.stderr).toContain(`dataset row ${tasks['claude-code'].id}: metadata.agent: expected one of`);
    expect(row.stderr).toContain('"Claude-Code"');
    expect(row.stderr).not.toMatch(/\n\s+at /);
  });

  it('every harness fixes its task (reward 1) beside the default agent; trained tokens are the sampled ones', {
    timeout: 300_000,
  }, async () => {
    const out = join(tmp, 'run');
    const run = await runCli(
      [
        ...['--dataset', dataset, '--out', out, '--steps', '1', '--prompts', '7', '--samples', '1'],
        ...['--concurrency', '7', '--pool-replicas', '0', '--no-validate', '--quiet'],
      ],
      280_000,
    );
    expect(run.code, `${run.stdout.slice(-2000)}\n${run.stderr.slice(-3000)}`).toBe(0);
    const results = await stepResults(out);
    const byTask = new Map(results.map((r) => [r.taskId, r]));
    expect(byTask.get(tasks['claude-code'].id), JSON.stringify(results)).toMatchObject({ reward: 1 });
    expect(byTask.get(tasks.codex.id), JSON.stringify(results)).toMatchObject({ reward: 1 });
    expect(byTask.get(tasks['qwen-code'].id), JSON.stringify(results)).toMatchObject({ reward: 1 });
    expect(byTask.get(tasks.pi.id), JSON.stringify(results)).toMatchObject({ reward: 1 });
    expect(byTask.get(tasks.opencode.id), JSON.stringify(results)).toMatchObject({ reward: 1 });
    expect(byTask.get(tasks['gemini-cli'].id), JSON.stringify(results)).toMatchObject({ reward: 1 });
    expect(['completed', 'truncated']).toContain(byTask.get(tasks.default.id)?.status);

    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    expect(new Set(rows.map((r) => r.label))).toEqual(new Set(Object.values(tasks).map((t) => t.id)));
    const agentOfRow = (id: string) =>
      new Set(rows.filter((r) => r.label === id).map((r) => r.metadata.agent));
    expect(agentOfRow(tasks['claude-code'].id)).toEqual(new Set(['claude-code']));
    expect(agentOfRow(tasks.codex.id)).toEqual(new Set(['codex']));
    expect(agentOfRow(tasks['qwen-code'].id)).toEqual(new Set(['qwen-code']));
    expect(agentOfRow(tasks.pi.id)).toEqual(new Set(['pi']));
    expect(agentOfRow(tasks.opencode.id)).toEqual(new Set(['opencode']));
    expect(agentOfRow(tasks['gemini-cli'].id)).toEqual(new Set(['gemini-cli']));
    expect(agentOfRow(tasks.default.id)).toEqual(new Set(['mini-swe-agent']));

    // The trained tokens of each harness rollout are exactly the script's replies as the engine sampled
    // them (each closed by <|im_end|>), with real log probs; observations and prompts are never trained.
    const tokenizer = await loadTokenizer(bundledTokenizerDir());
    const scripts: Array<[TaskSpec, Script, number]> = [
      [tasks['claude-code'], claudeCodeScript, 3],
      [tasks.codex, codexScript, 2],
      [tasks['qwen-code'], qwenCodeScript, 3],
      [tasks.pi, piScript, 3],
      [tasks.opencode, opencodeScript, 3],
      [tasks['gemini-cli'], geminiCliScript, 3],
    ];
    for (const [task, script, turns] of scripts) {
      const own = rows.filter((r) => r.label === task.id);
      expect(own.every((r) => r.reward === 1)).toBe(true);
      const { ids, logprobs } = trained(own);
      const fix = fixOf(task)!;
      const replies = Array.from({ length: turns }, (_, i) => `${script(i, fix)}<|im_end|>`).join('');
      expect(tokenizer.decode(ids)).toBe(replies);
      expect(logprobs.every((l) => Number.isFinite(l) && l <= 0)).toBe(true);
    }
  });

  const dockerReady = dockerForTests();
  it.runIf(dockerReady)(
    'every harness fixes its task in a docker sandbox too (reward 1)',
    {
      timeout: 300_000,
    },
    async () => {
      const out = join(tmp, 'docker');
      const run = await runCli(
        [
          ...['--dataset', dataset, '--out', out, '--sandbox', 'docker', '--steps', '1', '--prompts', '7'],
          ...['--samples', '1', '--concurrency', '7', '--pool-replicas', '0', '--no-validate', '--quiet'],
        ],
        280_000,
      );
      expect(run.code, `${run.stdout.slice(-2000)}\n${run.stderr.slice(-3000)}`).toBe(0);
      const results = await stepResults(out);
      for (const kind of ['claude-code', 'codex', 'qwen-code', 'pi', 'opencode', 'gemini-cli'] as const) {
        const result = results.find((r) => r.taskId === tasks[kind].id);
        expect(result, JSON.stringify(results)).toMatchObject({ reward: 1 });
      }
      const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
      expect(new Set(rows.filter((r) => r.label === tasks.codex.id).map((r) => r.metadata.agent))).toEqual(
        new Set(['codex']),
      );
    },
  );

  it('a harness on --sandbox local is one line naming the flag and the choices, exit 2', async () => {
    const run = await runCli(
      ['--dataset', dataset, '--sandbox', 'local', '--out', join(tmp, 'local')],
      60_000,
    );
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(
      /--sandbox local: the agent claude-code, codex, qwen-code, pi, opencode, gemini-cli .*--sandbox bubblewrap or docker/,
    );
    expect(run.stderr).not.toMatch(/\n\s+at /);
  });

  it('a harness that cannot be installed fails its rollout as an infrastructure failure, never reward 0', {
    timeout: 200_000,
  }, async () => {
    // An empty cache and store and a registry that refuses connections: the install cannot succeed.
    // Its own temp dir (the store's home), walkable by the sandbox user like the system's.
    const fresh = await mkdtemp(join(tmpdir(), 'vime-no-install-'));
    await chmod(fresh, 0o755);
    await mkdir(join(fresh, 'cache'));
    onTestFinished(() => rm(fresh, { recursive: true, force: true }));
    const out = join(tmp, 'no-install');
    const run = await runCli(
      [
        ...['--dataset', dataset, '--out', out, '--steps', '1', '--prompts', '7', '--samples', '1'],
        ...['--concurrency', '7', '--pool-replicas', '0', '--no-validate', '--quiet'],
        ...['--harness-registry', 'http://127.0.0.1:9'],
      ],
      180_000,
      { TMPDIR: fresh, VIME_HARNESS_CACHE: join(fresh, 'cache') },
    );
    expect(run.code, `${run.stdout.slice(-2000)}\n${run.stderr.slice(-3000)}`).toBe(0);
    const results = await stepResults(out);
    for (const task of [
      tasks['claude-code'],
      tasks.codex,
      tasks['qwen-code'],
      tasks.pi,
      tasks.opencode,
      tasks['gemini-cli'],
    ]) {
      const result = results.find((r) => r.taskId === task.id)!;
      expect(result.status, JSON.stringify(result)).toBe('failed');
      expect(result.reward).toBeUndefined();
      expect(JSON.stringify(result.error)).toContain('harness_install');
      expect(JSON.stringify(result.error)).toContain('127.0.0.1:9');
    }
    // Their groups are dropped: no row of theirs is trained; the default agent's row is.
    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    expect(new Set(rows.map((r) => r.label))).toEqual(new Set([tasks.default.id]));
  });
});
