/**
 * Claude Code, the real pinned binary, unmodified, in a bubblewrap sandbox that reaches only the capture
 * proxy: the stand-in engine (a scripted policy, not a model) answers in Qwen3's own tool-call format, the
 * proxy turns that into Anthropic tool_use blocks, Claude Code reads the buggy file, edits it and stops;
 * its change is graded in a fresh sandbox (reward 1), and every trained token of the finished session is
 * checked against what the engine was sent and sampled, turn by turn.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type Engine,
  type GenerateResult,
  loadTokenizer,
  type Sample,
  sglangEngine,
  startCaptureProxy,
  type TaskSpec,
} from '@vime/core';
import { startStandInEngine } from '@vime/core/standin';
import { bubblewrapProvider } from '@vime/sandbox';
import {
  buildOfflineTaskSet,
  captureAgentPatch,
  gradeInFreshSandbox,
  SweEnvironments,
  SwePools,
  setupSweTask,
} from '@vime/swe';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { installHarness } from './install.js';
import { agentOf, harnessSandboxSpec, runHarness } from './run.js';

const work = mkdtempSync(join(tmpdir(), 'vime-harness-e2e-'));
// The sandbox user must be able to walk to the proxy socket and its own work dirs.
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Call {
  inputIds: Int32Array;
  result: GenerateResult;
}

/** The engine client, keeping what the engine was sent and what it sampled. */
function recording(engine: Engine, calls: Call[]): Engine {
  return {
    ...engine,
    async generate(request, options) {
      const result = await engine.generate(request, options);
      calls.push({ inputIds: Int32Array.from(request.inputIds), result });
      return result;
    },
  };
}

/** The one changed line of a single-hunk gold patch: Claude Code's Edit arguments. */
function oneLineFix(task: TaskSpec): { file: string; old: string; new: string } | undefined {
  const patch = task.goldPatch ?? '';
  const file = /^\+\+\+ [ab]\/(.+)$/m.exec(patch)?.[1];
  const removed = patch.split('\n').filter((l) => l.startsWith('-') && !l.startsWith('---'));
  const added = patch.split('\n').filter((l) => l.startsWith('+') && !l.startsWith('+++'));
  if (!file || removed.length !== 1 || added.length !== 1) return undefined;
  return { file, old: removed[0]!.slice(1), new: added[0]!.slice(1) };
}

const toolCall = (name: string, args: Record<string, unknown>) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

describe('claude-code in a bubblewrap sandbox, through the capture proxy', () => {
  let task: TaskSpec;
  let fix: { file: string; old: string; new: string };
  let pools: SwePools;
  let environments: SweEnvironments;

  beforeAll(async () => {
    const set = await buildOfflineTaskSet({ dir: inject('offlineTasksDir') });
    environments = await SweEnvironments.forDataset(set.jsonlPath);
    const found = set.tasks.find((t) => oneLineFix(t) !== undefined);
    if (!found) throw new Error('the offline set has no task with a one-line gold patch');
    task = { ...found, metadata: { ...found.metadata, agent: 'claude-code' } };
    fix = oneLineFix(task)!;
    pools = new SwePools(bubblewrapProvider({ rootDir: join(work, 'grade') }), set.tasks, {
      kind: 'bubblewrap',
      environments,
    });
  }, 300_000);
  afterAll(() => pools?.close());

  it('fixes an offline task (reward 1), and every trained token is what the engine sampled', async () => {
    expect(agentOf(task.metadata)).toBe('claude-code');
    const installed = await installHarness('claude-code');
    const tokenizer = await loadTokenizer(qwen3Dir());
    const path = `${task.workdir}/${fix.file}`;
    const standIn = await startStandInEngine({
      tokenizer,
      policy: ({ prompt }) => {
        const results = prompt.split('<tool_response>').length - 1;
        if (results === 0) return `I will read the file first.\n${toolCall('Read', { file_path: path })}`;
        if (results === 1) {
          return `${toolCall('Edit', { file_path: path, old_string: fix.old, new_string: fix.new })}`;
        }
        return 'The bug is fixed.';
      },
    });
    const calls: Call[] = [];
    const engine = sglangEngine(standIn.url);
    const socketPath = join(work, 'proxy.sock');
    const proxy = await startCaptureProxy({ engine: recording(engine, calls), tokenizer, socketPath });
    const sandbox = await bubblewrapProvider({ rootDir: join(work, 'agent') }).create({
      ...environments.specFor(task, 'bubblewrap'),
      ...harnessSandboxSpec(installed, socketPath),
    });
    let samples: Sample[];
    try {
      await environments.prepare(sandbox, task, 'bubblewrap');
      const swe = await setupSweTask(sandbox, task);
      const sessionId = `cc-${randomUUID().slice(0, 8)}`;
      proxy.openSession(sessionId, { sampling: { temperature: 1 } });
      const run = await runHarness({
        installed,
        sandbox,
        proxy,
        sessionId,
        prompt: task.prompt,
        model: 'vime-policy',
        timeoutMs: 180_000,
      });
      expect(run.timedOut, run.stderr).toBe(false);
      expect(run.exitCode, run.stderr).toBe(0);
      const result = run.events.at(-1) as { type: string; is_error: boolean; result: string };
      expect(result).toMatchObject({ type: 'result', is_error: false, result: 'The bug is fixed.' });
      const uses = run.events.flatMap((e) => {
        const content = (e as { type: string; message?: { content?: unknown } }).message?.content;
        return (e as { type: string }).type === 'assistant' && Array.isArray(content)
          ? content
              .filter((b: { type: string }) => b.type === 'tool_use')
              .map((b: { name: string }) => b.name)
          : [];
      });
      expect(uses).toEqual(['Read', 'Edit']);
      // Three model turns and no other request reached the engine (no title, quota or token-count calls).
      expect(run.turns).toHaveLength(3);
      expect(calls).toHaveLength(3);

      const captured = await captureAgentPatch(swe);
      await sandbox.terminate();
      const graded = await gradeInFreshSandbox(pools, task, captured);
      expect(graded).toMatchObject({ status: 'graded', reward: 1 });
      samples = proxy.finishSession(sessionId, {
        reward: graded.status === 'graded' ? graded.reward : 0,
        baseSample: { metadata: { agent: 'claude-code' } },
      });

      // Per turn: the proxy recorded exactly the engine's prompt ids, sampled ids and log probs.
      run.turns.forEach((turn, i) => {
        expect(Array.from(turn.promptIds)).toEqual(Array.from(calls[i]!.inputIds));
        expect(Array.from(turn.outputIds)).toEqual(Array.from(calls[i]!.result.outputIds));
        expect(Array.from(turn.logprobs)).toEqual(Array.from(calls[i]!.result.logprobs));
      });
      // Per sample: the trained (mask 1) tokens are the sampled tokens of the turns, in order, with
      // their log probs; nothing else is trained.
      const trained: number[] = [];
      const trainedLogprobs: number[] = [];
      for (const s of samples) {
        expect(s.reward).toBe(1);
        expect(s.metadata.agent).toBe('claude-code');
        const start = s.tokens.length - s.response_length;
        s.loss_mask!.forEach((m, j) => {
          if (m === 1) {
            trained.push(s.tokens[start + j]!);
            trainedLogprobs.push(s.rollout_log_probs![j]!);
          }
        });
      }
      expect(trained).toEqual(run.turns.flatMap((t) => Array.from(t.outputIds)));
      expect(trainedLogprobs).toEqual(run.turns.flatMap((t) => Array.from(t.logprobs)));
    } finally {
      await sandbox.terminate();
      await proxy.close();
      await engine.close();
      await standIn.close();
    }
  }, 300_000);
});
