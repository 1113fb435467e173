import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startHealthStandIn } from '@vime/core/standin';
import { EXIT } from '@vime/core/utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { type FakeRay, startFakeRay } from '../testing/ray.js';
import { main } from './main.js';

const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vime-cli-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
});

async function vime(args: string[], env: Record<string, string> = {}) {
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env,
    cwd: dir,
  });
  return { code, stdout, stderr };
}
const docs = (text: string) => parseAllDocuments(text).map((d) => d.toJS());
const fixture = (name: string) =>
  readFile(new URL(`../__fixtures__/coding-agent/${name}`, import.meta.url), 'utf8');

describe('vime CLI', () => {
  it('renders the reference Job Group and volume with no config file', async () => {
    for (const engines of [1, 2, 3]) {
      const out = `render-${engines}`;
      const result = await vime(['skypilot', 'render', '--engines', String(engines), '--out', out]);
      expect(result.code).toBe(EXIT.ok);
      expect(result.stdout).toContain(
        `sky jobs launch -n ${engines === 1 ? 'coding-agent-rl' : `coding-agent-rl-${engines}eng`}`,
      );
      const group = await readFile(join(dir, out, 'job-group.yaml'), 'utf8');
      // The reference Job Group, but for the scripts and envs (see skypilot.int.test.ts): those it renders exist here.
      const [header, ...jobs] = docs(group) as Array<Record<string, unknown>>;
      const [refHeader, ...refJobs] = docs(await fixture(`${engines}-engine.yaml`)) as Array<
        Record<string, unknown>
      >;
      expect(header).toEqual(refHeader);
      expect(jobs.map((j) => j.name)).toEqual(refJobs.map((j) => j.name));
      for (const job of jobs) {
        for (const script of [job.setup, job.run] as string[]) {
          expect(existsSync(join(repoRoot, script.replace(/^bash /, '')))).toBe(true);
        }
      }
      const volume = await readFile(join(dir, out, 'volume.yaml'), 'utf8');
      expect(docs(volume)).toEqual(docs(await fixture('policy-volume.yaml')));
      expect(
        (await vime(['skypilot', 'validate', join(out, 'job-group.yaml'), join(out, 'volume.yaml')])).code,
      ).toBe(EXIT.ok);
    }
  });

  it('has --help for every command and documents exit codes', async () => {
    const top = await vime(['--help']);
    expect(top.code).toBe(EXIT.ok);
    expect(top.stdout).toMatch(/Exit codes:[\s\S]*2 +invalid usage/);
    for (const command of [
      'plan',
      'skypilot render',
      'skypilot validate',
      'slime args',
      'ray submit',
      'ray status',
      'ray logs',
      'ray stop',
      'engines wait',
    ]) {
      const result = await vime([...command.split(' '), '--help']);
      expect(result.code, command).toBe(EXIT.ok);
      expect(result.stdout, command).toMatch(new RegExp(`^Usage: vime ${command}`));
    }
    expect((await vime([])).code).toBe(EXIT.usage);
  });

  it('reads a YAML config, lets flags override it, and exits 3 when preflight fails', async () => {
    await writeFile(
      join(dir, 'small.yaml'),
      'engines: {count: 2}\nrollout: {batchSize: 4, samplesPerPrompt: 4}\nsandbox: {poolReplicas: 8}\n',
    );
    const result = await vime(['plan', '-c', 'small.yaml']);
    expect(result.code).toBe(EXIT.checks);
    expect(result.stdout).toContain('sglang2    H100:1');
    expect(result.stdout).toContain('error sandbox.poolReplicas: 16 concurrent rollouts');
    const fixed = await vime(['plan', '-c', 'small.yaml', '--pool-replicas', '16', '--mode', 'sync']);
    expect(fixed.code).toBe(EXIT.ok);
    expect(fixed.stdout).toContain('Command: python3 train.py');
    const json = JSON.parse(
      (await vime(['plan', '-c', 'small.yaml', '--pool-replicas', '16', '--json'])).stdout,
    );
    expect(json.plan.engineJobs).toEqual(['sglang', 'sglang2']);
    expect(json.preflight.ok).toBe(true);
  });

  it('exits 2 with the field and the fix for bad config, bad flags and rejected combinations', async () => {
    await writeFile(join(dir, 'typo.json'), JSON.stringify({ engine: { count: 2 } }));
    const typo = await vime(['plan', '-c', 'typo.json']);
    expect(typo.code).toBe(EXIT.usage);
    expect(typo.stderr).toMatch(/invalid launch config: .*Unrecognized key.*"engine"/);
    const flag = await vime(['slime', 'args', '--enignes', '2']);
    expect(flag.code).toBe(EXIT.usage);
    expect(flag.stderr).toContain("Unknown option '--enignes'");
    const mode = await vime(['plan', '--mode', 'fast']);
    expect(mode.code).toBe(EXIT.usage);
    expect(mode.stderr).toMatch(/mode: .*"sync".*"async"/);
    const rejected = await vime(['slime', 'args', '--weight-transport', 'nccl']);
    expect(rejected.code).toBe(EXIT.usage);
    expect(rejected.stderr).toContain(
      'weights.transport: delta weight updates require transport "disk", got "nccl"',
    );
    expect((await vime(['skypilot', 'render'])).stderr).toContain('--out DIR is required');
  });

  it('prints slime argv as a shell line or JSON, never with secrets', async () => {
    const env = { WANDB_API_KEY: 'very-secret' };
    const line = await vime(['slime', 'args', '--engines', '2'], env);
    expect(line.stdout).toMatch(
      /^python3 train_async\.py .*--rollout-external-engine-addrs "sglang-0\.\$SKYPILOT_JOBGROUP_NAME:30000" "sglang2-0\.\$SKYPILOT_JOBGROUP_NAME:30000"/,
    );
    expect(line.stdout).toContain('--use-wandb');
    expect(line.stdout).not.toContain('very-secret');
    const json = JSON.parse((await vime(['slime', 'args', '--json'], env)).stdout) as string[];
    expect(json.slice(0, 2)).toEqual(['python3', 'train_async.py']);
    const dry = await vime(['ray', 'submit', '--dry-run', '--submission-id', 'x'], {
      ...env,
      SKYPILOT_JOBGROUP_NAME: 'grp',
    });
    const request = JSON.parse(dry.stdout);
    expect(request.runtime_env.env_vars.WANDB_API_KEY).toBe('***');
    expect(request.entrypoint).toContain('--rollout-external-engine-addrs sglang-0.grp:30000');
    expect(dry.stdout).not.toContain('very-secret');
  });

  describe('ray', () => {
    let ray: FakeRay;
    beforeAll(async () => {
      ray = await startFakeRay({
        token: 'tok',
        script: (entrypoint) =>
          entrypoint.includes('fail')
            ? {
                lines: ['loading', 'Traceback (most recent call last):', 'ValueError: boom'],
                outcome: 'FAILED',
                exitCode: 1,
              }
            : { lines: ['step 1', 'step 2'] },
      });
    });
    afterAll(() => ray.close());

    it('submits, follows the log and exits 0 on success; resubmitting the same id starts nothing', async () => {
      const env = { RAY_AUTH_TOKEN: 'tok' };
      const first = await vime(
        ['ray', 'submit', '--address', ray.url, '--submission-id', 'good', '--', 'echo', 'ok'],
        env,
      );
      expect(first.code).toBe(EXIT.ok);
      expect(first.stdout).toBe('step 1\nstep 2\n');
      expect(first.stderr).toContain('submitted: good');
      const again = await vime(
        ['ray', 'submit', '--address', ray.url, '--submission-id', 'good', '--no-wait', '--', 'echo', 'ok'],
        env,
      );
      expect(again.stderr).toContain('already submitted: good');
      expect(again.stdout).toBe('good\n');
      expect(ray.created.filter((id) => id === 'good')).toHaveLength(1);

      const status = await vime(['ray', 'status', 'good', '--address', ray.url], env);
      expect(status.stdout).toMatch(/^good\tSUCCEEDED\tSUBMISSION/);
      const list = await vime(['ray', 'status', '--address', ray.url], env);
      expect(list.stdout.trim().split('\n').at(-1)).toMatch(/^01000000\tSUCCEEDED\tDRIVER/);
      expect((await vime(['ray', 'logs', 'good', '--address', ray.url], env)).stdout).toBe(
        'step 1\nstep 2\n',
      );
      expect((await vime(['ray', 'stop', 'good', '--address', ray.url], env)).stdout).toBe(
        'good had already ended\n',
      );
    });

    it("submits the plan's slime command with the trainer env and secrets in the runtime env, not in argv", async () => {
      const env = {
        RAY_AUTH_TOKEN: 'tok',
        WANDB_API_KEY: 'wandb-secret',
        SKYPILOT_JOBGROUP_NAME: 'coding-agent-2eng',
      };
      const result = await vime(
        ['ray', 'submit', '--engines', '2', '--address', ray.url, '--submission-id', 'plan-run', '--no-wait'],
        env,
      );
      expect(result.code).toBe(EXIT.ok);
      const status = JSON.parse(
        (await vime(['ray', 'status', 'plan-run', '--json', '--address', ray.url], env)).stdout,
      );
      expect(status.entrypoint).toMatch(/^cd \/root\/slime && python3 train_async\.py /);
      expect(status.entrypoint).toContain(
        '--rollout-external-engine-addrs sglang-0.coding-agent-2eng:30000 sglang2-0.coding-agent-2eng:30000',
      );
      expect(status.entrypoint).toContain('--use-wandb');
      expect(status.entrypoint).not.toContain('wandb-secret');
      expect(status.runtime_env.env_vars).toMatchObject({
        WANDB_API_KEY: 'wandb-secret',
        CUDA_DEVICE_MAX_CONNECTIONS: '1',
        SANDBOX_POOL_REPLICAS: '184',
      });
      expect(status.metadata).toEqual({ job_group: 'coding-agent-rl-2eng', engines: '2', mode: 'async' });
      expect(result.stderr + result.stdout).not.toContain('wandb-secret');
    });

    it('exits 1 with the job log tail when the job fails, and explains a missing token', async () => {
      const failed = await vime(['ray', 'submit', '--address', ray.url, '--', 'python3', 'fail.py'], {
        RAY_AUTH_TOKEN: 'tok',
      });
      expect(failed.code).toBe(EXIT.failed);
      expect(failed.stderr).toMatch(
        /ended FAILED: Job entrypoint command failed with exit code 1[\s\S]*--- last log lines ---[\s\S]*ValueError: boom/,
      );
      const noToken = await vime(['ray', 'status', '--address', ray.url]);
      expect(noToken.code).toBe(EXIT.failed);
      expect(noToken.stderr).toMatch(/HTTP 401: Unauthorized: Missing authentication token.*RAY_AUTH_TOKEN/);
      await writeFile(join(dir, 'token'), 'tok\n');
      expect((await vime(['ray', 'status', '--address', ray.url, '--token-file', 'token'])).code).toBe(
        EXIT.ok,
      );
    });
  });

  it('waits for engines and names the ones that never came up', async () => {
    // Unhealthy for its first health request whatever the machine's load, so the wait sees it start.
    const good = await startHealthStandIn({
      script: { type: 'slow-start', readyAfterMs: 100, readyAfterRequests: 1 },
    });
    const bad = await startHealthStandIn({ kind: 'vllm', script: { type: 'never-healthy' } });
    closers.push(good.close, bad.close);
    const ok = await vime(['engines', 'wait', good.url, '--timeout', '5s']);
    expect(ok.code).toBe(EXIT.ok);
    expect(ok.stdout).toMatch(new RegExp(`^${good.url}\\thealthy after \\d+\\.\\ds`));
    expect(ok.stderr).toContain(`${good.url}: starting (HTTP 503)`);
    const fail = await vime(['engines', 'wait', good.url, bad.url, '--kind', 'vllm', '--timeout', '1s']);
    expect(fail.code).toBe(EXIT.failed);
    expect(fail.stderr).toMatch(/1 of 2 engine\(s\) never became healthy/);
    expect(fail.stdout).toContain(`${bad.url}\tstarting\t`);
    // Plan-derived engines resolve the group name from the environment.
    const planned = await vime(['engines', 'wait', '--engines', '2', '--timeout', '1s'], {
      SKYPILOT_JOBGROUP_NAME: 'grp.invalid',
    });
    expect(planned.code).toBe(EXIT.failed);
    expect(planned.stderr).toContain(
      'waiting for 2 engine(s): http://sglang-0.grp.invalid:30000 http://sglang2-0.grp.invalid:30000',
    );
    expect(planned.stdout).toMatch(
      /^http:\/\/sglang-0\.grp\.invalid:30000\tunreachable\t\d+ checks\tfirst error: .*ENOTFOUND/m,
    );
    const noGroup = await vime(['engines', 'wait']);
    expect(noGroup.code).toBe(EXIT.usage);
    expect(noGroup.stderr).toContain('SKYPILOT_JOBGROUP_NAME is not set');
  });

  it('runs as a process and returns its exit code', async () => {
    const cli = fileURLToPath(new URL('../cli.ts', import.meta.url));
    const run = promisify(execFile);
    const { stdout } = await run(process.execPath, [
      '--import',
      'tsx',
      '--conditions=@vime/source',
      cli,
      'slime',
      'args',
      '--json',
    ]);
    expect(JSON.parse(stdout)[1]).toBe('train_async.py');
    const failure = await run(process.execPath, [
      '--import',
      'tsx',
      '--conditions=@vime/source',
      cli,
      'plan',
      '--engines',
      'x',
    ]).catch((e: { code: number; stderr: string }) => e);
    expect(failure).toMatchObject({ code: EXIT.usage });
    expect((failure as { stderr: string }).stderr).toContain(
      '--engines expects a positive whole number, got "x"',
    );
  });
});
