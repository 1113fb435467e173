// The run config: one file for every knob, layered under env vars and flags, checked with messages a user
// can act on, exported as JSON Schema, and kept with the run (`run-config.yaml`, read back by --resume).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TaskSpec } from '@vime/core';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { samplingOf } from '../agents.js';
import { mixAgents } from '../tasks.js';
import { runConfigJsonSchema } from './file.js';
import { KNOBS } from './knobs.js';
import { RUN_CONFIG_FILE, renderRunConfig } from './render.js';
import { type ResolvedConfig, resolveConfig } from './resolve.js';
import { ConfigSchema } from './schema.js';

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const EXAMPLES = join(root, 'examples/coding-agent/configs');
const dir = mkdtempSync(join(tmpdir(), 'vime-run-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function write(name: string, text: string): string {
  writeFileSync(join(dir, name), text);
  return name;
}
const resolved = (argv: string[], env: Record<string, string> = {}) =>
  resolveConfig(argv, env, { cwd: dir }) as ResolvedConfig;
const errorOf = (fn: () => unknown): string => {
  try {
    fn();
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error('no error');
};

describe('precedence: embedded defaults < --config file < env vars < flags', () => {
  const file = write('layers.yaml', 'agents: { max_turns: 5 }\nsampling: { temperature: 0.6 }\n');
  it.each([
    [[], {}, 12, 'default'],
    [['--config', file], {}, 5, 'file layers.yaml (agents.max_turns)'],
    [['--config', file], { AGENT_MAX_TURNS: '7' }, 7, 'env AGENT_MAX_TURNS'],
    [['--config', file, '--max-turns', '9'], { AGENT_MAX_TURNS: '7' }, 9, 'flag --max-turns'],
  ])('%j with %j: max turns %d from %s', (argv, env, turns, source) => {
    const r = resolved(argv, env);
    expect(r.config.maxTurns).toBe(turns);
    expect(r.sources.maxTurns).toBe(source);
    // The other layers leave what they do not set alone.
    expect(r.config.temperature).toBe(argv.length ? 0.6 : 1);
    expect(r.config.steps).toBe(2);
    expect(r.sources.steps).toBe('default');
  });

  it('takes every knob from a file, in file units (durations, sizes, the negated pool switch)', () => {
    const r = resolved([
      '--config',
      write(
        'units.yaml',
        [
          'run: { rollout_deadline: 40m }',
          'engines: { wait: 90, router: { deadline: 1.5m } }',
          'sandbox: { warm_pools: false, limits: { memory_bytes: 4GiB, tmp_bytes: 512MiB, cpus: 1.5, pids: null } }',
          'sampling: { top_k: 20, stop: ["</answer>"] }',
          'dataset: { path: data/rows.parquet }',
        ].join('\n'),
      ),
    ]).config;
    expect(r).toMatchObject({
      rolloutGuardMs: 40 * 60_000,
      engineWaitMs: 90_000,
      engineDeadlineMs: 90_000,
      noPool: true,
      sandboxLimits: { memoryBytes: 4 * 2 ** 30, tmpBytes: 512 * 2 ** 20, cpus: 1.5, pids: null },
      topK: 20,
      stop: ['</answer>'],
      // A relative path is the file's: the config travels with its data.
      dataset: join(dir, 'data/rows.parquet'),
    });
  });
});

describe('mistakes in a config file: the key path, the value and the fix', () => {
  it.each([
    ['run:\n  step: 3\n', 'unknown key run.step (did you mean "run.steps"?)'],
    ['temperature: 0.5\n', 'unknown key temperature (did you mean "sampling.temperature"?)'],
    ['sampling:\n  top-p: 0.9\n', 'unknown key sampling.top-p (did you mean "sampling.top_p"?)'],
    [
      'agents: { mix: { claude: 1 } }\n',
      'unknown key agents.mix.claude (did you mean "agents.mix.claude-code"? known: mini-swe-agent, claude-code, codex, qwen-code, pi, opencode, gemini-cli)',
    ],
    [
      'run: { mode: asnyc }\n',
      'run.mode: string "asnyc" is not accepted (did you mean "async"?); write one of "sync", "async"',
    ],
    ['sampling: { top_p: 2 }\n', 'sampling.top_p: number 2 is not accepted; write a value ≤ 1'],
    ['sampling: { stop: "</x>" }\n', 'sampling.stop: string "</x>" is not accepted; write a list'],
    [
      'engines: { wait: soon }\n',
      'engines.wait: string "soon" is not accepted; write a duration such as "90s", "10m" or "1h"',
    ],
    [
      'engines: { urls: [sglang-0:30000] }\n',
      'engines.urls.0: string "sglang-0:30000" is not accepted; write a URL such as "http://10.0.0.5:30000"',
    ],
    [
      'sandbox: { limits: { memory: 4GiB } }\n',
      'unknown key sandbox.limits.memory (did you mean "sandbox.limits.memory_bytes"?',
    ],
    ['run: [1, 2]\n', 'run: array(2) is not accepted; write an object'],
    ['run:\n  steps: 1\n  steps: 2\n', 'not valid YAML or JSON at line 3, column 3'],
    ['{"run": {"steps": 2}\n', 'not valid YAML or JSON at line'],
    ['', 'the file is empty'],
    ['- steps: 2\n', 'expected a mapping of sections (run:, sampling:, …), got array(1)'],
    ['agents: { mix: { codex: 0 } }\n', 'every weight is 0'],
    [
      'engines: { stand_in: { policy: debugger } }\nagents: { default: codex }\n',
      "engines.stand_in.policy: debugger speaks mini-swe-agent's protocol only, and codex would get no command it can run",
    ],
    ['engines: { stand_in: { policy: debuger } }\n', 'engines.stand_in.policy'],
  ])('%j', (text, message) => {
    const file = write('bad.yaml', text);
    expect(errorOf(() => resolved(['--config', file]))).toContain(message);
  });

  it('names every problem of the file at once, each on its own line', () => {
    const file = write('two.yaml', 'run: { step: 3 }\nsampling: { top_p: 2 }\n');
    expect(errorOf(() => resolved(['--config', file])).split('\n')).toEqual([
      '--config two.yaml: unknown key run.step (did you mean "run.steps"?)',
      '--config two.yaml: sampling.top_p: number 2 is not accepted; write a value ≤ 1',
    ]);
  });

  it('names a wrong value the way it was set: flag, env var', () => {
    expect(errorOf(() => resolved(['--top-p', '1.5']))).toBe(
      '--top-p: number 1.5 is not accepted; write a value ≤ 1',
    );
    expect(errorOf(() => resolved([], { AGENT_MAX_TURNS: '-2' }))).toBe(
      'AGENT_MAX_TURNS: number -2 is not accepted; write a value ≥ 0',
    );
    expect(
      errorOf(() => resolved(['--engine-url', 'http://v:8000', '--engine-kind', 'vllm', '--top-p', '0.9'])),
    ).toBe(
      '--top-p: 0.9 with vLLM engines cannot be trained on exactly (vLLM returns no per-token nucleus to replay); sample with top_p 1, or use SGLang engines with the top-p patch',
    );
    expect(errorOf(() => resolved(['--engine-kind', 'vllm', '--top-logprobs', '128']))).toBe(
      "--top-logprobs: 128 is above the vLLM engines' limit, engines.max_logprobs (--engine-max-logprobs) = 20; start vLLM with --max-logprobs 128 and set that to 128, or lower --top-logprobs",
    );
    expect(errorOf(() => resolved(['--top-logprobs', '0']))).toBe(
      '--top-logprobs: number 0 is not accepted; write a value > 0',
    );
    const topk = resolved([
      '--engine-kind',
      'vllm',
      '--top-logprobs',
      '128',
      '--engine-max-logprobs',
      '129',
    ]).config;
    expect([topk.topLogprobs, topk.engineMaxLogprobs]).toEqual([128, 129]);
    expect(samplingOf(topk).topLogprobs).toBe(128);
    expect(errorOf(() => resolved(['--config', 'nowhere.yaml']))).toBe(
      '--config nowhere.yaml: does not exist; give a YAML or JSON run config file',
    );
  });
});

describe('the JSON Schema and the example configs', () => {
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  const schema = runConfigJsonSchema();

  it('is the committed run-config.schema.json (regenerate: node --import tsx --conditions=@vime/source scripts/run-config-schema.ts)', () => {
    const committed = JSON.parse(readFileSync(join(root, 'packages/loop/run-config.schema.json'), 'utf8'));
    expect(committed).toEqual(JSON.parse(JSON.stringify(schema)));
  });

  it('validates both example configs, and rejects what the loop rejects', () => {
    const validate = ajv.compile(schema);
    for (const name of ['default.yaml', 'cluster.yaml']) {
      const doc = parseYaml(readFileSync(join(EXAMPLES, name), 'utf8'));
      expect(validate(doc), `${name}: ${JSON.stringify(validate.errors)}`).toBe(true);
      // And the loop reads them.
      expect(() => resolved(['--config', join(EXAMPLES, name)])).not.toThrow();
    }
    expect(validate({ run: { step: 3 } })).toBe(false);
    expect(validate({ sampling: { top_p: 2 } })).toBe(false);
    expect(validate({ engines: { wait: 'soon' } })).toBe(false);
  });

  it('default.yaml is the embedded defaults, knob for knob, and names every knob', () => {
    const r = resolved(['--config', join(EXAMPLES, 'default.yaml')]);
    expect(r.config).toEqual(ConfigSchema.parse({}));
    const doc = parseYaml(readFileSync(join(EXAMPLES, 'default.yaml'), 'utf8'));
    const get = (key: string) =>
      key.split('.').reduce<unknown>((v, k) => (v as Record<string, unknown>)?.[k], doc);
    for (const knob of KNOBS) expect(get(knob.key), knob.key).not.toBeUndefined();
  });

  it('cluster.yaml sets SGLang engines, a SWE-smith parquet and a Claude Code + Codex mix', () => {
    const { config } = resolved(['--config', join(EXAMPLES, 'cluster.yaml')]);
    expect(config).toMatchObject({
      engineKind: 'sglang',
      engineUrls: ['http://sglang-0:30000', 'http://sglang-1:30000'],
      dataset: '/data/SWE-smith/train.parquet',
      agentMix: { 'claude-code': 1, codex: 1 },
      sandbox: 'docker',
    });
  });
});

describe('the resolved config kept with the run', () => {
  it('run-config.yaml runs again as --config and says where each value came from', () => {
    const first = resolved(
      ['--config', write('mine.yaml', 'sampling: { temperature: 0.6 }\n'), '--steps', '3'],
      { AGENT_MAX_TURNS: '7' },
    );
    const text = renderRunConfig(first.config, first.sources);
    expect(text).toContain('  steps: 3 # flag --steps\n');
    expect(text).toContain('  temperature: 0.6 # file mine.yaml (sampling.temperature)\n');
    expect(text).toContain('  max_turns: 7 # env AGENT_MAX_TURNS\n');
    expect(text).toContain('  top_p: 1 # default\n');
    const again = resolved(['--config', write('again.yaml', text)]);
    expect(again.config).toEqual(first.config);
  });

  it("--resume takes the run's config and its sources, and refuses a flag that would change it", () => {
    const run = join(dir, 'run');
    mkdirSync(run);
    const start = resolved(['--steps', '3', '--out', run]);
    writeFileSync(join(run, 'config.json'), JSON.stringify(start.config));
    writeFileSync(join(run, RUN_CONFIG_FILE), renderRunConfig(start.config, start.sources));
    const again = resolved(['--resume', 'run', '--quiet'], { AGENT_MAX_TURNS: '30' });
    expect(again.config).toEqual({ ...start.config, resume: run, out: run, quiet: true });
    expect(again.sources.steps).toBe('flag --steps');
    expect(again.sources.maxTurns).toBe('default');
    // The same command line with --resume appended is fine; a change is refused, not ignored.
    expect(() => resolved(['--steps', '3', '--resume', 'run'])).not.toThrow();
    expect(errorOf(() => resolved(['--resume', 'run', '--steps', '4', '--temperature', '0.5']))).toBe(
      '--resume run continues the run with the config it started with; --steps 4 (the run has 3), --temperature 0.5 (the run has 1) would change it: leave those out, or start a new run with --out',
    );
    expect(errorOf(() => resolved(['--resume', 'nothing-here']))).toMatch(
      /^--resume nothing-here: no run there/,
    );
  });
});

describe('agent mix', () => {
  const task = (i: number, agent?: string): TaskSpec =>
    ({ id: `t${i}`, metadata: agent ? { agent } : {} }) as unknown as TaskSpec;

  it("gives rows that name no agent the mix, in proportion at every prefix, and keeps a row's own", () => {
    const tasks = [...Array.from({ length: 9 }, (_, i) => task(i)), task(9, 'mini-swe-agent')];
    const mixed = mixAgents(tasks, { 'claude-code': 2, codex: 1 });
    const agents = mixed.map((t) => t.metadata.agent);
    expect(agents).toEqual([
      'claude-code',
      'codex',
      'claude-code',
      'claude-code',
      'codex',
      'claude-code',
      'claude-code',
      'codex',
      'claude-code',
      'mini-swe-agent',
    ]);
    // Deterministic: the same dataset gives the same agents.
    expect(mixAgents(tasks, { 'claude-code': 2, codex: 1 })).toEqual(mixed);
  });
});
