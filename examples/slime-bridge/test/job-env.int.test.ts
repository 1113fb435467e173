/**
 * Every setting the rendered trainer job passes as an env var takes effect in the rollout server: the
 * 1-, 2- and 3-engine Job Groups are rendered with `vime skypilot render`, the server is started with
 * exactly the trainer job's env (plus `VIME_ENGINE_URLS`, which trainer-run.sh sets), and GET /config
 * shows what it runs with.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CliIo } from '@vime/core/utils';
import { main } from '@vime/launch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, stringify } from 'yaml';
import { sharedOfflineSet } from '../../../packages/swe/src/__fixtures__/offline-set.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const NODE_ARGS = ['--import', 'tsx', '--conditions=@vime/source'];
const children: ChildProcess[] = [];
const temp: string[] = [];
afterAll(async () => {
  for (const c of children) c.kill('SIGTERM');
  await Promise.all(temp.map((d) => rm(d, { recursive: true, force: true })));
});

function start(script: string, args: string[], env: Record<string, string>, ready: RegExp): Promise<string> {
  const child = spawn(process.execPath, [...NODE_ARGS, script, ...args], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let stderr = '';
  child.stderr!.on('data', (d) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    let text = '';
    child.stdout!.on('data', (d) => {
      text += d;
      const m = ready.exec(text);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`${script} exited with ${code}: ${stderr}`)));
  });
}

let engineUrl: string;
// The test run's offline task set, as a dataset file on the trainer (SWESMITH_DATASET).
let dataset: string;
beforeAll(async () => {
  dataset = (await sharedOfflineSet()).jsonlPath;
  engineUrl = await start(
    'packages/loop/src/standin-server.ts',
    ['--dataset', dataset],
    { PATH: process.env.PATH!, HOME: process.env.HOME! },
    /listening on (http:\/\/\S+)/,
  );
}, 120_000);

describe('the trainer job env configures the rollout server', () => {
  it.each([1, 2, 3])('%i-engine Job Group', { timeout: 240_000 }, async (n) => {
    // Values unlike the defaults, so a setting that is not read cannot pass by accident.
    const config = {
      engines: { count: n },
      agent: { maxTurns: 5 + n, evalTimeoutSec: 300 + n },
      rollout: { batchSize: n, samplesPerPrompt: 2 },
      sandbox: { kind: 'bubblewrap', noPool: n === 2, poolReplicas: n },
      dataset: { path: dataset, perRepo: n, poolSuffix: `run${n}` },
    };
    const dir = await mkdtemp(join(tmpdir(), `vime-env-${n}-`));
    temp.push(dir);
    await writeFile(join(dir, 'config.yaml'), stringify(config));
    const io = { stdout: () => {}, stderr: () => {}, env: {}, cwd: root } as unknown as CliIo;
    expect(await main(['skypilot', 'render', '-c', join(dir, 'config.yaml'), '--out', dir], io)).toBe(0);
    const jobs = parseAllDocuments(await readFile(join(dir, 'job-group.yaml'), 'utf8')).map(
      (d) => d.toJS() as { name: string; envs?: Record<string, unknown> },
    );
    const envs = Object.fromEntries(Object.entries(jobs.at(-1)!.envs ?? {}).map(([k, v]) => [k, String(v)]));
    const serverUrl = await start(
      'packages/slime/src/serve.ts',
      ['--host', '127.0.0.1', '--port', '0'],
      { PATH: process.env.PATH!, HOME: process.env.HOME!, ...envs, VIME_ENGINE_URLS: engineUrl },
      /rollout server on (http:\/\/\S+)/,
    );
    const { settings } = (await fetch(`${serverUrl}/config`).then((r) => r.json())) as {
      settings: Record<string, unknown>;
    };
    expect(settings).toMatchObject({
      maxTurns: Number(envs.AGENT_MAX_TURNS),
      concurrency: Number(envs.VIME_ROLLOUT_CONCURRENCY),
      gradeTimeoutMs: Number(envs.AGENT_EVAL_TIMEOUT_SEC) * 1000,
      poolReplicas: Number(envs.SANDBOX_POOL_REPLICAS),
      noPool: envs.SANDBOX_NO_POOL === '1',
      perRepo: Number(envs.SWESMITH_PER_REPO),
      poolSuffix: envs.SWESMITH_POOL_SUFFIX,
      sandbox: envs.VIME_SANDBOX,
      dataset: envs.SWESMITH_DATASET,
      repoFilter: (envs.SWESMITH_REPOS ?? '').split(' ').filter(Boolean),
      engineUrls: [engineUrl],
    });
    // And they are the config's values, not only the env's.
    expect(settings).toMatchObject({
      maxTurns: 5 + n,
      concurrency: 2 * n,
      gradeTimeoutMs: (300 + n) * 1000,
      poolReplicas: n,
      noPool: n === 2,
      perRepo: n,
      poolSuffix: `run${n}`,
      sandbox: 'bubblewrap',
      dataset,
    });
    children.at(-1)!.kill('SIGTERM');
  });
});
