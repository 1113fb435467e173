import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { resolvePlan } from '../plan.js';
import { CODING_AGENT_CONFIGS, codingAgentPlan } from '../presets/coding-agent.js';
import {
  engineAddresses,
  engineJobNames,
  type JobGroupConfig,
  renderJobGroup,
  renderTask,
  renderVolume,
} from './render.js';
import { formatProblem, validateSkyPilotYaml } from './validate.js';

const fixture = (name: string) =>
  readFileSync(new URL(`../__fixtures__/coding-agent/${name}`, import.meta.url), 'utf8');
const docs = (text: string) => parseAllDocuments(text as string).map((d) => d.toJS());

/** SkyPilot loads YAML with PyYAML (YAML 1.1); load ours with it too. */
function pyYamlLoad(text: string): unknown[] {
  const out = execFileSync(
    'python3',
    ['-c', 'import sys, json, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))'],
    { input: text, encoding: 'utf8' },
  );
  return JSON.parse(out) as unknown[];
}

/**
 * Where the rendered Job Group differs from the reference example's on purpose: its jobs run this
 * repository's bridge scripts (the reference's `scripts/*.sh` are not here), the trainer sets only the env
 * vars something reads, and it mounts no SkyPilot-sandbox wheels (Vime brings its own sandboxes).
 */
function structure(documents: unknown[]): unknown[] {
  return documents.map((d) => {
    const { setup: _s, run: _r, envs: _e, file_mounts: _f, ...rest } = d as Record<string, unknown>;
    return rest;
  });
}

const TRAINER_ENVS = [
  'AGENT_EVAL_TIMEOUT_SEC',
  'AGENT_MAX_TURNS',
  'MODEL_DIR',
  'MODEL_HF_REPO',
  'MODEL_SCRIPT',
  'SANDBOX_NO_POOL',
  'SANDBOX_POOL_REPLICAS',
  'SWESMITH_PER_REPO',
  'SWESMITH_POOL_SUFFIX',
  'SWESMITH_REPOS',
  'VIME_LAUNCH_CONFIG',
  'VIME_ROLLOUT_CONCURRENCY',
  'VIME_SANDBOX',
];

describe('reference coding-agent Job Groups', () => {
  for (const engines of [1, 2, 3]) {
    it(`reproduces the ${engines}-engine Job Group from the typed config (but for scripts and envs)`, () => {
      const plan = resolvePlan(CODING_AGENT_CONFIGS[engines as 1 | 2 | 3]);
      const rendered = renderJobGroup(plan.jobGroup);
      const expected = fixture(`${engines}-engine.yaml`);
      expect(structure(docs(rendered))).toEqual(structure(docs(expected)));
      expect(structure(pyYamlLoad(rendered))).toEqual(structure(pyYamlLoad(expected)));
      const jobs = docs(rendered).slice(1) as Array<{
        setup: string;
        run: string;
        envs?: Record<string, string>;
      }>;
      for (const job of jobs)
        expect(`${job.setup}\n${job.run}`).toMatch(
          /^bash examples\/slime-bridge\/launch\/\S+\.sh\nbash examples\/slime-bridge\/launch\/\S+\.sh$/,
        );
      expect(Object.keys(jobs.at(-1)!.envs ?? {}).sort()).toEqual(TRAINER_ENVS);

      const validation = validateSkyPilotYaml(rendered);
      expect(validation.kind).toBe('job-group');
      expect(validation.problems).toEqual([]);
      // The reference file itself passes the same rules.
      expect(validateSkyPilotYaml(expected).problems).toEqual([]);
    });
  }

  it('reproduces the policy volume', () => {
    const rendered = renderVolume(resolvePlan().volume);
    expect(parseYaml(rendered)).toEqual(parseYaml(fixture('policy-volume.yaml')));
    const validation = validateSkyPilotYaml(rendered);
    expect(validation.kind).toBe('volume');
    expect(validation.problems).toEqual([]);
  });

  it('derives engine names, the members list and discovery hostnames from the count', () => {
    const plan = codingAgentPlan(4, { overrides: { engines: { accelerators: 'L40S:1' } } });
    expect(plan.jobGroup.engines.accelerators).toBe('L40S:1');
    expect(plan.engineJobs).toEqual(['sglang', 'sglang2', 'sglang3', 'sglang4']);
    expect(plan.jobGroup.trainer.envs).not.toHaveProperty('SGLANG_MEMBERS');
    expect(docs(renderJobGroup(plan.jobGroup)).at(-1)).not.toHaveProperty('envs.SGLANG_MEMBERS');
    // Opt-in, for scripts that read the member list (the reference example's do).
    const withMembers = docs(renderJobGroup({ ...plan.jobGroup, membersEnv: 'SGLANG_MEMBERS' })).at(-1) as {
      envs: Record<string, string>;
    };
    expect(withMembers.envs.SGLANG_MEMBERS).toBe('sglang sglang2 sglang3 sglang4');
    expect(plan.slime.engines.external).toEqual([
      'sglang-0.$SKYPILOT_JOBGROUP_NAME:30000',
      'sglang2-0.$SKYPILOT_JOBGROUP_NAME:30000',
      'sglang3-0.$SKYPILOT_JOBGROUP_NAME:30000',
      'sglang4-0.$SKYPILOT_JOBGROUP_NAME:30000',
    ]);
  });

  it('emits empty env values as "" (never a bare key that loads as null)', () => {
    const text = renderJobGroup(resolvePlan().jobGroup);
    expect(text).toContain('SWESMITH_POOL_SUFFIX: ""');
    expect(text).toContain('WANDB_API_KEY: ""');
    expect(text).not.toMatch(/^\s+[A-Z_]+:\s*$/m);
  });
});

interface RenderedJob {
  name: string;
  resources: { accelerators: string };
  run: string;
  envs: Record<string, string>;
}

const minimal: JobGroupConfig = {
  name: 'rl',
  trainer: { run: 'bash train.sh', accelerators: 'H100:8' },
  engines: { count: 2, kind: 'vllm', model: '/models/qwen', accelerators: 'L40S:1', port: 8000 },
};

describe('renderTask', () => {
  it('emits a single task that loads under the task schema, with empty envs quoted and secrets referenced', () => {
    const text = renderTask({
      name: 'sglang-router',
      infra: 'kubernetes/my-ctx',
      cpus: '4+',
      ports: [30000],
      image: 'docker:lmsysorg/sglang:v0.5.15',
      envs: { WORKERS: 3, EXTRA: '', DEBUG: false },
      secrets: ['HF_TOKEN'],
      run: 'python -m sglang_router.launch_router \\\n  --policy cache_aware',
    });
    expect(pyYamlLoad(text)).toEqual([
      {
        name: 'sglang-router',
        resources: {
          infra: 'kubernetes/my-ctx',
          cpus: '4+',
          image_id: 'docker:lmsysorg/sglang:v0.5.15',
          ports: [30000],
        },
        envs: { WORKERS: '3', EXTRA: '', DEBUG: 'false' },
        secrets: { HF_TOKEN: '' },
        run: 'python -m sglang_router.launch_router \\\n  --policy cache_aware',
      },
    ]);
    expect(text).toContain('run: |');
    expect(validateSkyPilotYaml(text)).toMatchObject({ kind: 'task', ok: true, problems: [] });
    expect(() => renderTask({ name: 't', run: 'x', envs: { HF_TOKEN: 'hf_abc' } })).toThrow(
      /task\.envs\.HF_TOKEN looks like a credential/,
    );
    expect(() => renderTask({ name: 't', run: 'x', envs: { A: null as never } })).toThrow(
      /envs\.A: env values are never null/,
    );
  });
});

describe('renderJobGroup', () => {
  it('puts vLLM engines on their own, cheaper accelerators and derives their command', () => {
    const [header, e1, e2, trainer] = docs(renderJobGroup(minimal)) as RenderedJob[];
    expect(header).toEqual({
      name: 'rl',
      execution: 'parallel',
      primary_tasks: ['trainer'],
      termination_delay: '60s',
    });
    expect(e1!.name).toBe('vllm');
    expect(e2!.name).toBe('vllm2');
    expect(e1!.resources.accelerators).toBe('L40S:1');
    expect(e1!.run).toBe('vllm serve /models/qwen --tensor-parallel-size 1 --host 0.0.0.0 --port 8000');
    expect(trainer!.resources.accelerators).toBe('H100:8');
    // No member list unless asked for (membersEnv).
    expect(trainer!.envs).toBeUndefined();
    expect(
      engineJobNames({ engines: { ...minimal.engines, kind: 'vllm', namePrefix: 'gen', count: 3 } } as never),
    ).toEqual(['gen', 'gen2', 'gen3']);
    expect(engineAddresses(minimal)).toEqual([
      'vllm-0.$SKYPILOT_JOBGROUP_NAME:8000',
      'vllm2-0.$SKYPILOT_JOBGROUP_NAME:8000',
    ]);
    expect(validateSkyPilotYaml(renderJobGroup(minimal)).ok).toBe(true);
  });

  const rejects = (config: unknown, pattern: RegExp) => {
    let error: unknown;
    try {
      renderJobGroup(config as JobGroupConfig);
    } catch (e) {
      error = e;
    }
    expect(VimeError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(pattern);
  };

  it('rejects a null env value, naming the field and the fix', () => {
    rejects(
      { ...minimal, trainer: { ...minimal.trainer, envs: { MODEL_DIR: null } } },
      /trainer\.envs\.MODEL_DIR.*never null.*""/,
    );
  });
  it('rejects an inlined credential and says to reference it as a secret', () => {
    rejects(
      { ...minimal, trainer: { ...minimal.trainer, envs: { WANDB_API_KEY: 'abc123' } } },
      /WANDB_API_KEY looks like a credential.*trainer\.secrets.*--secret WANDB_API_KEY/,
    );
  });
  it('rejects bad job names, bad durations, bad accelerators and typos', () => {
    rejects({ ...minimal, name: 'my group' }, /name: .*letters, digits/);
    rejects({ ...minimal, terminationDelay: '60 sec' }, /terminationDelay: .*duration/);
    rejects(
      { ...minimal, engines: { ...minimal.engines, accelerators: 'H100x1' } },
      /engines\.accelerators.*NAME:COUNT/,
    );
    rejects({ ...minimal, engines: { ...minimal.engines, acceleratrs: 'H100:1' } }, /engines.*acceleratrs/);
    rejects({ ...minimal, engines: { ...minimal.engines, count: 0 } }, /engines\.count.*at least one engine/);
    rejects(
      { ...minimal, trainer: { ...minimal.trainer, name: 'vllm2' } },
      /collides with an engine job name/,
    );
    rejects(
      {
        ...minimal,
        membersEnv: 'VLLM_MEMBERS',
        trainer: { ...minimal.trainer, envs: { VLLM_MEMBERS: 'x' } },
      },
      /derived from engines\.count/,
    );
    rejects({ ...minimal, engines: { count: 1 } }, /either `run`.*or `model`/);
  });
});

const validGroup = fixture('2-engine.yaml');
function problemsOf(text: string) {
  return validateSkyPilotYaml(text).problems.map(formatProblem);
}

describe('validateSkyPilotYaml', () => {
  it('reports a misspelled key with its path and a suggestion', () => {
    const text = validGroup.replace(
      'resources:\n  infra: kubernetes\n  accelerators: H100:4',
      'resouces:\n  infra: kubernetes\n  accelerators: H100:4',
    );
    expect(problemsOf(text)).toEqual([
      'document 4 (trainer) resouces: unknown key (did you mean "resources"?)',
    ]);
    const nested = validGroup.replace('  accelerators: H100:4', '  accelerator: H100:4');
    expect(problemsOf(nested)).toEqual([
      'document 4 (trainer) resources.accelerator: unknown key (did you mean "accelerators"?)',
    ]);
  });

  it('reports a null env the way SkyPilot refuses it', () => {
    const text = validGroup.replace('  WANDB_PROJECT: "slime-coding-agent"', '  WANDB_PROJECT:');
    const [problem] = validateSkyPilotYaml(text).problems;
    expect(problem).toMatchObject({
      document: 4,
      job: 'trainer',
      path: 'envs.WANDB_PROJECT',
      severity: 'error',
    });
    expect(problem!.message).toMatch(/'WANDB_PROJECT' is None.*WANDB_PROJECT: ""/);
  });

  it('checks the header: name, primary tasks, termination delay, unknown keys', () => {
    const text = validGroup
      .replace('name: coding-agent-rl-2eng', 'name: coding agent')
      .replace('primary_tasks: [trainer]', 'primary_tasks: [trainr]\nretries: 3')
      .replace('termination_delay: 60s', 'termination_delay: 1 minute');
    const result = validateSkyPilotYaml(text);
    expect(result.ok).toBe(false);
    expect(result.problems.map(formatProblem)).toEqual([
      'warning: document 1 retries: unknown Job Group header key, ignored by SkyPilot',
      'document 1 name: invalid Job Group name "coding agent": use letters, digits, "-" and "_" only',
      'document 1 primary_tasks[0]: primary_tasks references unknown job "trainr" (did you mean "trainer"?)',
      'document 1 termination_delay: invalid duration "1 minute": write a whole number with an optional unit s, m, h, d or w (e.g. "60s")',
    ]);
    const perJob = validGroup.replace(
      'termination_delay: 60s',
      'termination_delay:\n  default: 30s\n  sglang2: 2m\n  trainr: 1h',
    );
    expect(problemsOf(perJob)).toEqual([
      'document 1 termination_delay.trainr: keys must be "default" or a job name (did you mean "trainer"?)',
    ]);
  });

  it('reports duplicate and bad job names, bad accelerators and bad infra, all at once', () => {
    const text = validGroup
      .replace('name: sglang2', 'name: sglang')

      .replace('  accelerators: H100:4', '  accelerators: H100 x4')
      .replace(
        'name: trainer\nresources:\n  infra: kubernetes',
        'name: trainer\nresources:\n  infra: (?i:aws)',
      );
    expect(problemsOf(text)).toEqual([
      'document 3 (sglang) name: Duplicate job name in JobGroup: "sglang"',
      'document 4 (trainer) resources.infra: expected "cloud[/region[/zone]]", "*" or "kubernetes[/context]"',
      'document 4 (trainer) resources.accelerators: expected "NAME" or "NAME:COUNT", e.g. "H100:4"',
      'warning: document 1: jobs are pinned to different infra (kubernetes, (?i:aws)); SkyPilot places a Job Group on one infra',
    ]);
  });

  it('requires hostname-safe job names in a Job Group, not in a plain task', () => {
    expect(problemsOf(validGroup.replace('name: sglang2', 'name: sglang.2'))).toEqual([
      'document 3 (sglang.2) name: invalid job name "sglang.2": use letters, digits, "-" and "_" only (it becomes a hostname)',
    ]);
    expect(validateSkyPilotYaml('name: my.task\nrun: echo').ok).toBe(true);
  });

  it('accepts what the loader accepts: numbers in envs, null top-level keys, accelerator maps', () => {
    const task = [
      'name: t',
      'resources: {infra: aws/us-east-1, accelerators: {A100: 8}, cpus: 4+, ports: [8080, 9000-9010]}',
      'envs: {TP: 4, ON: true}',
      'setup:',
      'run: echo hi',
      'volumes: {/data: {name: vol, sub_path: x}}',
    ].join('\n');
    const result = validateSkyPilotYaml(task);
    expect(result.kind).toBe('task');
    expect(result.problems).toEqual([]);
  });

  it('checks placement: one infra per group, Kubernetes when inter_connection is on', () => {
    const mixed = validGroup.replace(
      'name: sglang2\nresources:\n  infra: kubernetes',
      'name: sglang2\nresources:\n  infra: aws',
    );
    expect(problemsOf(mixed)).toEqual([
      'warning: document 1: jobs are pinned to different infra (kubernetes, aws); SkyPilot places a Job Group on one infra',
    ]);
    const connected = mixed.replace(
      'termination_delay: 60s',
      'termination_delay: 60s\ninter_connection: true',
    );
    expect(problemsOf(connected)).toContain(
      'document 3 (sglang2) resources.infra: inter_connection needs every job on Kubernetes (hostname discovery), but this job is pinned to aws',
    );
    expect(
      problemsOf(
        validGroup.replace('termination_delay: 60s', 'termination_delay: 60s\ninter_connection: yes please'),
      ),
    ).toEqual(['document 1 inter_connection: inter_connection must be a boolean']);
  });

  it('treats a header without execution: parallel as a pipeline, and rejects it when a Job Group is asked for', () => {
    const pipeline = validGroup.replace('execution: parallel\n', '');
    expect(validateSkyPilotYaml(pipeline).kind).toBe('pipeline');
    const forced = validateSkyPilotYaml(pipeline, { kind: 'job-group' });
    expect(forced.ok).toBe(false);
    expect(forced.problems[0]!.message).toMatch(/execution: parallel/);
  });

  it('checks volume YAML (case-sensitive enums, sizes)', () => {
    const text = fixture('policy-volume.yaml')
      .replace('access_mode: ReadWriteMany', 'access_mode: readwritemany')
      .replace('size: 100Gi', 'size: 100 GB')
      .replace('type: k8s-pvc', 'type: pvc');
    const problems = validateSkyPilotYaml(text, { kind: 'volume' }).problems.map((p) => p.path);
    expect(problems.sort()).toEqual(['config.access_mode', 'size', 'type']);
  });

  it('reports YAML syntax errors with the document number', () => {
    const result = validateSkyPilotYaml('name: a\n  bad: [\n');
    expect(result.ok).toBe(false);
    expect(result.problems[0]!.message).toMatch(/^YAML syntax/);
  });
});
