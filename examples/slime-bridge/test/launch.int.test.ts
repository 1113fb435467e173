import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { CliIo } from '@vime/core/utils';
import { main, renderVolume, resolvePlan, validateSkyPilotYaml } from '@vime/launch';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml, stringify } from 'yaml';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const root = here('../../../');
const docs = (text: string) => parseAllDocuments(text).map((d) => d.toJS() as Record<string, unknown>);
const scripts = ['engine-setup.sh', 'engine-run.sh', 'trainer-setup.sh', 'trainer-run.sh'];
const temp: string[] = [];
afterAll(() => Promise.all(temp.map((d) => rm(d, { recursive: true, force: true }))));

async function vime(args: string[], env: Record<string, string> = {}) {
  let stdout = '';
  let stderr = '';
  const io: CliIo = {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env,
    cwd: root,
  } as CliIo;
  const code = await main(args, io);
  return { code, stdout, stderr };
}

async function rendered(n: number): Promise<string> {
  const out = await mkdtemp(join(tmpdir(), `vime-render-${n}-`));
  temp.push(out);
  const r = await vime([
    'skypilot',
    'render',
    '-c',
    `examples/slime-bridge/launch/${n}-engine.yaml`,
    '--out',
    out,
  ]);
  expect(r.code, r.stderr).toBe(0);
  return out;
}

describe('slime bridge launch configs', () => {
  it.each([1, 2, 3])(
    '%i-engine: the rendered Job Group runs the bridge scripts and passes launch check',
    async (n) => {
      const dir = await rendered(n);
      const text = await readFile(join(dir, 'job-group.yaml'), 'utf8');
      expect(validateSkyPilotYaml(text).problems).toEqual([]);
      const ours = docs(text);
      // The same Job Group as the reference example but for the commands, env vars and mounts of each job.
      const reference = docs(
        await readFile(join(root, `packages/launch/src/__fixtures__/coding-agent/${n}-engine.yaml`), 'utf8'),
      );
      const shape = (d: Record<string, unknown>) => ({
        ...d,
        setup: undefined,
        run: undefined,
        envs: undefined,
        file_mounts: undefined,
      });
      expect(ours.map(shape)).toEqual(reference.map(shape));
      for (const job of ours.slice(1)) {
        for (const field of ['setup', 'run'] as const) {
          const script = /^bash examples\/slime-bridge\/launch\/(\S+)$/.exec(String(job[field]))?.[1];
          expect(scripts).toContain(script);
        }
      }
      const config = parseYaml(await readFile(here(`../launch/${n}-engine.yaml`), 'utf8'));
      expect(validateSkyPilotYaml(renderVolume(resolvePlan(config, { env: {} }).volume)).problems).toEqual(
        [],
      );

      // Every script, module, checkpoint and env var the jobs refer to exists and is used.
      const check = await vime(['launch', 'check', dir]);
      expect(check.stdout).toMatch(/trainer: ok \(\d+ files, 13 env vars, each read\)/);
      expect(check.code, check.stdout).toBe(0);

      // The Ray job the trainer submits: the bridge's modules, on a PYTHONPATH that keeps the shell's.
      const trainer = ours.at(-1) as { envs: Record<string, string> };
      // As trainer-run.sh does: the config from VIME_LAUNCH_CONFIG, PYTHONPATH exported by the shell.
      const configFile = join(dir, 'launch-config.json');
      await writeFile(configFile, trainer.envs.VIME_LAUNCH_CONFIG!);
      const submit = await vime(['ray', 'submit', '--dry-run', '-c', configFile], {
        ...trainer.envs,
        HOME: '/root',
        PYTHONPATH: '/root/sky_workdir/packages/slime/python:/opt/extra',
      });
      expect(submit.code, submit.stderr).toBe(0);
      const request = JSON.parse(submit.stdout) as {
        entrypoint: string;
        runtime_env: { env_vars: Record<string, string> };
      };
      for (const flag of [
        '--custom-generate-function-path vime_bridge.generate',
        '--dynamic-sampling-filter-path vime_bridge.drop_infra_failed_groups',
        '--custom-reward-post-process-path vime_bridge.normalize_rewards_by_group',
        '--custom-rollout-log-function-path vime_bridge.log_rollout_metrics',
        '--over-sampling-batch-size',
      ]) {
        expect(request.entrypoint).toContain(flag);
      }
      expect(request.runtime_env.env_vars.PYTHONPATH!.split(':')).toEqual(
        expect.arrayContaining(['/root/sky_workdir/packages/slime/python', '/opt/extra']),
      );
    },
    120_000,
  );

  it('the hooks slime is told to load import, and are the functions named', async () => {
    const { stdout } = await promisify(execFile)(
      '/usr/bin/python3',
      [
        '-c',
        'import vime_bridge as b, inspect; print(" ".join(n for n in ("generate", "drop_infra_failed_groups", "normalize_rewards_by_group", "log_rollout_metrics") if callable(getattr(b, n))))',
      ],
      { env: { ...process.env, PYTHONPATH: join(root, 'packages/slime/python') } },
    );
    expect(stdout.trim()).toBe(
      'generate drop_infra_failed_groups normalize_rewards_by_group log_rollout_metrics',
    );
  });

  it('launch check names each kind of dangling reference', async () => {
    const dir = await rendered(1);
    const file = join(dir, 'job-group.yaml');
    const [header, ...jobs] = docs(await readFile(file, 'utf8'));
    const trainer = jobs.at(-1) as { setup: string; run: string; envs: Record<string, unknown> };
    const config = JSON.parse(String(trainer.envs.VIME_LAUNCH_CONFIG));
    // The old defaults: scripts that are not in the repository; a knob nothing reads; a setup that makes
    // another model's checkpoint than the one slime loads.
    trainer.setup = 'bash scripts/trainer-setup.sh';
    trainer.envs.ROLLOUT_SHUFFLE = '1';
    trainer.envs.MODEL_DIR = 'Other-Model';
    trainer.envs.VIME_LAUNCH_CONFIG = JSON.stringify(config);
    await writeFile(file, [header, ...jobs].map((d) => stringify(d)).join('---\n'));
    const r = await vime(['launch', 'check', dir]);
    expect(r.code).toBe(3);
    expect(r.stdout).toMatch(
      /trainer: script: scripts\/trainer-setup\.sh \(run by the command\) does not exist/,
    );
    expect(r.stdout).toMatch(/trainer: env: ROLLOUT_SHUFFLE is set but nothing the job runs reads it/);
    expect(r.stdout).toMatch(
      /trainer: checkpoint: --ref-load \/root\/Qwen3-14B_torch_dist: nothing in the job's setup provides it/,
    );

    // A bridge without the metrics hook (the module slime is told to load lacks the function).
    const copy = await mkdtemp(join(tmpdir(), 'vime-root-'));
    temp.push(copy);
    for (const part of [
      'examples/slime-bridge/launch',
      'packages/slime/python',
      'packages/slime/src',
      'scripts',
    ]) {
      await cp(join(root, part), join(copy, part), { recursive: true });
    }
    const bridge = join(copy, 'packages/slime/python/vime_bridge.py');
    await writeFile(
      bridge,
      (await readFile(bridge, 'utf8')).replace('def log_rollout_metrics(', 'def other_name('),
    );
    const fresh = await rendered(1);
    const missing = await vime(['launch', 'check', fresh, '--root', copy]);
    expect(missing.code).toBe(3);
    expect(missing.stdout).toMatch(
      /module: --custom-rollout-log-function-path vime_bridge\.log_rollout_metrics: packages\/slime\/python\/vime_bridge\.py defines no log_rollout_metrics\(\)/,
    );
  }, 120_000);

  it('scripts are valid bash', async () => {
    for (const s of scripts) await promisify(execFile)('bash', ['-n', here(`../launch/${s}`)]);
  });
});
