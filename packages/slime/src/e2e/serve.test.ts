import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { oneLineFix } from '@vime/harness/standin';
import { buildOfflineTaskSet } from '@vime/swe';
import { afterAll, expect, inject, it } from 'vitest';

declare module 'vitest' {
  export interface ProvidedContext {
    offlineTasksDir: string;
  }
}

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const NODE_ARGS = ['--import', 'tsx', '--conditions=@vime/source'];
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) c.kill('SIGTERM');
});

function start(script: string, args: string[], ready: RegExp): Promise<string> {
  const child = spawn(process.execPath, [...NODE_ARGS, script, ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let text = '';
    child.stdout!.on('data', (d) => {
      text += d;
      const m = ready.exec(text);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
  });
}

it('serves coding-agent rollouts to slime through the Python bridge, each sample on the agent its metadata names', {
  timeout: 300_000,
}, async () => {
  const engineUrl = await start('packages/loop/src/standin-server.ts', [], /listening on (http:\/\/\S+)/);
  const out = await mkdtemp(join(tmpdir(), 'vime-serve-'));
  const serverUrl = await start(
    'packages/slime/src/serve.ts',
    [
      '--engine-url',
      engineUrl,
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--sandbox',
      'bubblewrap',
      '--out',
      out,
    ],
    /rollout server on (http:\/\/\S+)/,
  );
  const set = await buildOfflineTaskSet({ dir: inject('offlineTasksDir') });
  const rows = (await readFile(set.jsonlPath, 'utf8')).trim().split('\n');
  // A third row as slime hands it over with `metadata.agent`: the real Claude Code binary runs it.
  const harnessTask = set.tasks.find((t) => oneLineFix(t) !== undefined)!;
  const harnessRow = {
    ...JSON.parse(rows.find((r) => JSON.parse(r).instance_id === harnessTask.id)!),
    agent: 'claude-code',
  };
  const script = `
import asyncio, json, sys, types
import vime_bridge
from stand_in_sample import Sample
rows = [json.loads(l) for l in sys.argv[1:]]
async def main():
    samples = [Sample(group_index=g, index=g * 2 + i, prompt=r["problem_statement"], label=r["instance_id"], metadata=r)
               for g, r in enumerate(rows) for i in range(2)]
    out = await asyncio.gather(*(vime_bridge.generate(types.SimpleNamespace(), s, {"temperature": 1.0, "max_new_tokens": 512}) for s in samples))
    flat = [x for o in out for x in (o if isinstance(o, list) else [o])]
    print(json.dumps([{"status": s.status.value, "reward": s.reward, "index": s.index, "group_index": s.group_index,
      "rl": s.response_length, "mask": len(s.loss_mask), "lp": len(s.rollout_log_probs), "masked": s.loss_mask.count(0),
      "instance": s.metadata.get("instance_id"), "agent": s.metadata.get("agent")} for s in flat]))
asyncio.run(main())`;
  const args = ['-c', script, rows[0]!, rows[1]!, JSON.stringify(harnessRow)];
  const { stdout } = await promisify(execFile)('/usr/bin/python3', args, {
    env: {
      ...process.env,
      PYTHONPATH: join(root, 'packages/slime/python'),
      VIME_ROLLOUT_URL: serverUrl,
      VIME_SAMPLE_CLASS: 'stand_in_sample:Sample',
    },
    timeout: 260_000,
  });
  const samples = JSON.parse(stdout) as Array<Record<string, number | string | null>>;
  expect(samples.length).toBeGreaterThanOrEqual(6);
  for (const s of samples) {
    expect(s.status).toBe('completed');
    expect([0, 1]).toContain(s.reward);
    expect(s.mask).toBe(s.rl);
    expect(s.lp).toBe(s.rl);
    expect(s.masked).toBeGreaterThan(0); // observations are loss-masked
  }
  expect(new Set(samples.map((s) => s.index))).toEqual(new Set([0, 1, 2, 3, 4, 5]));
  expect(samples.find((s) => s.index === 2)?.group_index).toBe(1);
  // The row without an agent ran the example's own; the claude-code samples fixed their task.
  for (const s of samples) expect(s.agent).toBe(s.group_index === 2 ? 'claude-code' : 'mini-swe-agent');
  for (const s of samples.filter((s) => s.group_index === 2)) expect(s.reward).toBe(1);
  // The server's metric sink: one JSONL line per served rollout, its reward as graded.
  const lines = (await readFile(join(out, 'metrics.jsonl'), 'utf8'))
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(lines[0]).toMatchObject({ kind: 'run', schema: 'vime.metrics/1' });
  const served = lines.filter((l) => l.kind === 'rollout');
  expect(served.map((l) => l.status)).toEqual(new Array(6).fill('completed'));
  for (const l of served) expect([0, 1]).toContain(l.reward);
});
