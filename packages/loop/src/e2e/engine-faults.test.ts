// Engine faults under the coding-agent loop: three stand-in engines as separate processes behind the
// capture proxy's router, one SIGKILLed mid-step and restarted on its port.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeSamples } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const NODE_ARGS = ['--import', 'tsx', '--conditions=@vime/source'];
const CLI = 'packages/loop/src/cli.ts';
const STANDIN = 'packages/loop/src/standin-server.ts';

let tmp: string;
const children: ChildProcess[] = [];
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-engine-faults-'));
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await rm(tmp, { recursive: true, force: true });
});

/** Start a stand-in engine process; resolves with its URL once it listens. */
function startEngine(port = 0): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [...NODE_ARGS, STANDIN, '--port', String(port), '--slots', '32'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let text = '';
    child.stdout!.on('data', (d) => {
      text += d;
      const m = /listening on (http:\/\/\S+)/.exec(text);
      if (m) resolve({ url: m[1]!, child });
    });
    child.once('exit', (code) => reject(new Error(`stand-in engine exited with ${code}`)));
  });
}

/** Generation requests an engine finished (its Prometheus latency histogram count). */
async function finished(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/sglang:e2e_request_latency_seconds_count\{[^}]*\} (\d+)/.exec(text)?.[1] ?? 0);
}

describe('coding-agent loop over three engine processes', () => {
  it('loses no rollout when one engine is SIGKILLed mid-step, and readmits it when it restarts', {
    timeout: 600_000,
  }, async () => {
    // One at a time: the first builds the offline task set the others then read.
    const engines = [await startEngine(), await startEngine(), await startEngine()];
    const victim = engines[1]!;
    const out = join(tmp, 'kill');
    const args = [
      '--out',
      out,
      ...engines.flatMap((e) => ['--engine-url', e.url]),
      // Only rollout completions and failed requests can take the dead engine down.
      '--engine-health-interval',
      '10m',
      // Step 1: the kill, mid-step. Step 2: new sessions, some placed on the readmitted engine.
      '--steps',
      '2',
      '--prompts',
      '12',
      '--samples',
      '4',
      '--concurrency',
      '48',
      // A grading hiccup of a very busy machine (not the engine) gets a replacement, as in production;
      // what the engine kill costs is checked attempt by attempt below.
      '--sibling-attempts',
      '3',
      '--no-validate',
      '--quiet',
    ];
    const cli = spawn(process.execPath, [...NODE_ARGS, CLI, ...args], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(cli);
    let stdout = '';
    let stderr = '';
    cli.stdout!.on('data', (d) => (stdout += d));
    cli.stderr!.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => cli.once('exit', resolve));

    // Mid-step: once the victim has answered a few turns, SIGKILL it; restart it on its port a moment later.
    const deadline = Date.now() + 300_000;
    while ((await finished(victim.url).catch(() => 0)) < 2) {
      if (Date.now() > deadline) throw new Error(`the victim never served a turn\n${stdout}\n${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    victim.child.kill('SIGKILL');
    const killedAt = Date.now();
    await new Promise((r) => setTimeout(r, 300));
    const restarted = await startEngine(Number(new URL(victim.url).port));
    expect(restarted.url).toBe(victim.url);

    const code = await exited;
    expect(code, `${stdout}\n${stderr.slice(-3000)}`).toBe(0);
    expect(stdout).toMatch(/rollouts: \d+ completed, \d+ truncated, 0 failed, 0 aborted/);
    // No attempt failed for the engine: the router moved every session of the dead engine.
    const lines = (await readFile(join(out, 'metrics.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.filter((l) => typeof l.error === 'string' && l.error.startsWith('engine_error'))).toEqual(
      [],
    );
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report.rollout_metrics.rollouts.total).toBe(96);

    // Taken down by a rollout completion or a failed request, not by the (10-minute) background interval,
    // and no later than the first rollout completion after the kill.
    const log = report.router.log as Array<{
      event: string;
      url?: string;
      trigger?: string;
      at: number;
      rolloutsFinished: number;
    }>;
    const down = log.find((e) => e.event === 'engine:down' && e.url === victim.url);
    expect(down, JSON.stringify(log)).toBeDefined();
    expect(['completion', 'failure']).toContain(down!.trigger);
    expect(down!.at).toBeGreaterThanOrEqual(killedAt);
    const finishedAtKill = log.find((e) => e.at >= killedAt)?.rolloutsFinished ?? 0;
    expect(down!.rolloutsFinished - finishedAtKill).toBeLessThanOrEqual(1);
    // Readmitted once it answered again, and given sessions: the new process served turns.
    const up = log.find((e) => e.event === 'engine:up' && e.url === victim.url);
    expect(up, JSON.stringify(log)).toBeDefined();
    expect(up!.at).toBeGreaterThan(down!.at);
    expect(await finished(restarted.url)).toBeGreaterThan(0);

    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    expect(new Set(rows.map((r) => r.rollout_id)).size).toBe(48);
    const step2 = decodeSamples(await readFile(join(out, 'steps', '2.msgpack')));
    expect(step2.some((r) => (r.metadata.engines as string[]).includes(victim.url))).toBe(true);
    for (const row of rows) {
      expect(['completed', 'truncated']).toContain(row.status);
      // A reward (0 or 1) always comes from grading the agent's patch.
      expect(row.metadata.grade_outcome).toBeDefined();
    }
    // Sessions that were on the victim and moved: one row each (every turn's prompt extends the token
    // history already sent, byte for byte, across the switch), no drift.
    const moved = rows.filter((r) => {
      const perTurn = r.metadata.turn_engines as string[][];
      const first = perTurn.findIndex((t) => t.includes(victim.url));
      return first >= 0 && perTurn.slice(first).some((t) => t.some((u) => u !== victim.url));
    });
    expect(moved.length).toBeGreaterThan(0);
    for (const row of moved) {
      expect(row.metadata.trajectory_rows).toBe(1);
      expect(row.metadata.drift).toMatchObject({ forks: 0 });
    }
    expect(report.router.session_moves).toBeGreaterThanOrEqual(moved.length);
    for (const e of [...engines, restarted]) if (e !== victim) e.child.kill('SIGTERM');
  });

  it('ends rollouts as infra failures with the cause when every engine is down past the deadline, claims nothing while the breaker is open, and goes on when an engine is back', {
    timeout: 600_000,
  }, async () => {
    const engine = await startEngine();
    const out = join(tmp, 'breaker');
    const cli = spawn(
      process.execPath,
      [
        ...NODE_ARGS,
        CLI,
        '--out',
        out,
        '--engine-url',
        engine.url,
        '--engine-deadline',
        '2s',
        '--engine-health-interval',
        '10m',
        '--steps',
        '1',
        '--prompts',
        '2',
        '--samples',
        '4',
        '--concurrency',
        '4',
        '--no-validate',
        '--quiet',
      ],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(cli);
    let stdout = '';
    let stderr = '';
    cli.stdout!.on('data', (d) => (stdout += d));
    cli.stderr!.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => cli.once('exit', resolve));
    const deadline = Date.now() + 300_000;
    while ((await finished(engine.url).catch(() => 0)) < 2) {
      if (Date.now() > deadline) throw new Error(`the engine never served a turn\n${stdout}\n${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    engine.child.kill('SIGKILL');
    // Down for longer than the 2 s deadline, then back on its port.
    await new Promise((r) => setTimeout(r, 6000));
    const back = await startEngine(Number(new URL(engine.url).port));

    const code = await exited;
    expect(code, `${stdout}\n${stderr.slice(-3000)}`).toBe(0);
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    const { rollouts } = report.rollout_metrics;
    expect(rollouts.total).toBe(8);
    expect(rollouts.failed).toBeGreaterThanOrEqual(1);
    expect(rollouts.completed + rollouts.truncated).toBeGreaterThanOrEqual(1);
    // Infra failures with the cause, never a reward.
    expect(stdout).toMatch(/failed\/aborted by cause: .*failed:engine_error/);
    const results = JSON.parse(await readFile(join(out, 'steps', '1.results.json'), 'utf8')) as Array<{
      status: string;
      reward?: number;
      error?: { code: string; message: string };
    }>;
    const failed = results.filter((r) => r.status === 'failed');
    expect(failed.length).toBe(rollouts.failed);
    for (const r of failed) {
      expect(r.reward).toBeUndefined();
      expect(r.error!.code).toBe('engine_error');
      // A SIGKILLed engine shows as a reset, a refused connection, or a socket closed mid-answer, by timing.
      expect(r.error!.message).toMatch(
        /no healthy engine for .*deadline 2\.0 s.*(ECONN(RESET|REFUSED)|UND_ERR_SOCKET: other side closed)/,
      );
    }
    const log = report.router.log as Array<{ event: string; at: number; claimsStarted: number }>;
    const open = log.find((e) => e.event === 'breaker:open');
    const close = log.find((e) => e.event === 'breaker:close');
    expect(open, JSON.stringify(log)).toBeDefined();
    expect(close, JSON.stringify(log)).toBeDefined();
    expect(close!.at - open!.at).toBeGreaterThan(2000);
    // No sandbox claim started while no engine was healthy.
    expect(close!.claimsStarted).toBe(open!.claimsStarted);
    expect(await finished(back.url)).toBeGreaterThan(0);
    back.child.kill('SIGTERM');
  });
});
