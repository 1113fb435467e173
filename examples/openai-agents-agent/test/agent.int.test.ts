/**
 * The Agents SDK coding agent trained end to end over both wires, through the example's own program as a
 * user runs it: the coding-agent loop of `@vime/loop` with a `SandboxAgent` (the real `@openai/agents` at
 * its pinned version) for every sample, fixing offline SWE tasks in bubblewrap sandboxes through the capture proxy, in front
 * of the stand-in engine replaying a scripted fix (a stand-in, not a model). Every rollout is graded 1 in
 * a fresh sandbox, the step's batch is handed off, and the token audit at hand-off passes every row.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeSamples } from '@vime/core';
import { runProcess } from '@vime/core/utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const MAIN = 'examples/openai-agents-agent/src/main.ts';

const runMain = (args: string[]) =>
  runProcess(process.execPath, ['--import', 'tsx', '--conditions=@vime/source', MAIN, ...args], {
    cwd: ROOT,
    timeoutMs: 540_000,
    maxOutputBytes: Number.POSITIVE_INFINITY,
  });

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-openai-agents-agent-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe.each(['chat-completions', 'responses'])('over %s', (api) => {
  it('trains the Agents SDK agent in the loop: reward 1 on every rollout, the batch handed off, the token audit passes', async () => {
    const out = join(tmp, api);
    const args = ['--api', api, '--out', out, '--steps', '1', '--prompts', '2', '--samples', '2', '--quiet'];
    const run = await runMain(args);
    expect(run.exitCode, run.stderr.slice(-3000)).toBe(0);
    expect(run.stdout).toMatch(/stand-in engine\(s\) — a scripted policy/);
    expect(run.stdout).toMatch(/rollouts: 4 completed/);
    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    expect(rows).toHaveLength(4);
    for (const row of rows) {
      expect(row.reward).toBe(1);
      expect(row.metadata).toMatchObject({ agent: 'openai-agents', exit_status: 'Submitted', api });
      // Three model calls: look, fix, answer; two of them tool calls that ran in the sandbox.
      expect(row.metadata.trajectory_turns).toEqual([0, 1, 2]);
      expect(row.metadata.drift).toEqual({ forks: 0, realigns: 0, retokenizedTokens: 0 });
    }
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report.token_audit).toMatchObject({
      samples: 4,
      failed_samples: 0,
      rollouts: 4,
      failed_rollouts: 0,
    });
    const trained = rows.reduce((n, r) => n + r.loss_mask!.filter((m) => m === 1).length, 0);
    expect(report.token_audit.tokens).toBe(trained);
  }, 600_000);
});

it('the program: a bad flag value is named with its fix, exit 2, no stack trace', async () => {
  for (const [args, message] of [
    [['--steps', 'many'], /--steps: "many" is not a number/],
    [['--api', 'grpc'], /--api: "grpc" is not one of chat-completions, responses; pass one of them/],
  ] as const) {
    const run = await runMain([...args]);
    expect(run.exitCode, run.stderr).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stderr).not.toMatch(/\n\s+at /);
  }
}, 90_000);
