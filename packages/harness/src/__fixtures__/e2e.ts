/**
 * The end-to-end run of a real harness on an offline task: the stand-in engine (a scripted policy, not a
 * model) answers in Qwen3's own tool-call format, the proxy turns that into the harness's dialect, the
 * harness runs unmodified in a bubblewrap (or docker) sandbox that reaches only the proxy, its change is
 * graded in a fresh sandbox, and every trained token of the finished session is checked against what the
 * engine was sent and sampled, turn by turn.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CapturedTurn, capturedTurnRecord, type Sample, type TaskSpec } from '@vime/core';
import { type Engine, type GenerateResult, loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { auditTokens } from '@vime/grpo';
import { bubblewrapProvider, dockerProvider } from '@vime/sandbox';
import {
  buildOfflineTaskSet,
  captureAgentPatch,
  gradeInFreshSandbox,
  SweEnvironments,
  SwePools,
  setupSweTask,
} from '@vime/swe';
import { expect, inject } from 'vitest';
import { qwen3Dir } from './tokenizer.js';
import { type HarnessKind, installHarness } from '../install.js';
import { agentOf, type HarnessRun, harnessSandboxSpec, runHarness } from '../run.js';
import { fixOf, oneLineFix, type Script, toolResultsIn } from '../standin.js';

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
    // Harnesses stream their turns: the streamed path is recorded the same way.
    ...(engine.generateStream
      ? {
          async generateStream(request, options) {
            const result = await engine.generateStream!(request, options);
            calls.push({ inputIds: Int32Array.from(request.inputIds), result });
            return result;
          },
        }
      : {}),
  };
}

export interface E2eOutcome {
  run: HarnessRun;
  reward: number | undefined;
  samples: Sample[];
  engineCalls: number;
  /** The task it ran (its prompt as the harness was given it). */
  task: TaskSpec;
}

/**
 * Run `kind` on the first offline task with a one-line gold patch, scripted by `script`; check its tokens.
 * The agent runs in a bubblewrap or a docker sandbox (docker: the default image with the task's workspace
 * copied in); grading is always in a fresh bubblewrap one.
 */
export async function harnessOnOfflineTask(
  kind: HarnessKind,
  script: Script,
  agentSandbox: 'bubblewrap' | 'docker' = 'bubblewrap',
): Promise<E2eOutcome> {
  const work = mkdtempSync(join(tmpdir(), `vime-harness-${kind}-`));
  // The sandbox user must be able to walk to the proxy socket and its own work dirs.
  chmodSync(work, 0o755);
  const set = await buildOfflineTaskSet({ dir: inject('offlineTasksDir') });
  const environments = await SweEnvironments.forDataset(set.jsonlPath);
  const found = set.tasks.find((t) => oneLineFix(t) !== undefined);
  if (!found) throw new Error('the offline set has no task with a one-line gold patch');
  const task: TaskSpec = { ...found, metadata: { ...found.metadata, agent: kind } };
  const fix = fixOf(task)!;
  expect(agentOf(task.metadata)).toBe(kind);
  const pools = new SwePools(bubblewrapProvider({ rootDir: join(work, 'grade') }), set.tasks, {
    kind: 'bubblewrap',
    environments,
  });
  const installed = await installHarness(kind);
  const tokenizer = await loadTokenizer(qwen3Dir());
  const standIn = await startStandInEngine({
    tokenizer,
    policy: ({ prompt }) => script(toolResultsIn(prompt), fix),
  });
  const calls: Call[] = [];
  const engine = sglangEngine(standIn.url);
  const socketPath = join(work, 'proxy.sock');
  const proxy = await startCaptureProxy({ engine: recording(engine, calls), tokenizer, socketPath });
  const turnLog: CapturedTurn[] = [];
  proxy.events.on('turn', (e) => turnLog.push(capturedTurnRecord(e.sessionId, e.turn)));
  const { image: rootfs, ...spec } = environments.specFor(task, 'bubblewrap');
  const sandbox = await (
    agentSandbox === 'docker' ? dockerProvider() : bubblewrapProvider({ rootDir: join(work, 'agent') })
  ).create({
    ...spec,
    ...(agentSandbox === 'bubblewrap' && rootfs !== undefined ? { image: rootfs } : {}),
    ...harnessSandboxSpec(installed, socketPath),
  });
  try {
    await environments.prepare(sandbox, task, 'bubblewrap');
    const swe = await setupSweTask(sandbox, task);
    const sessionId = `${kind}-${randomUUID()}`;
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
    const captured = await captureAgentPatch(swe);
    await sandbox.terminate();
    const graded = await gradeInFreshSandbox(pools, task, captured);
    const reward = graded.status === 'graded' ? graded.reward : undefined;
    const samples = proxy.finishSession(sessionId, {
      reward: reward ?? 0,
      baseSample: { metadata: { agent: kind } },
    });
    expect(run.turns.length).toBe(calls.length);
    // Per turn: the proxy recorded exactly the engine's prompt ids, sampled ids and log probs.
    run.turns.forEach((turn, i) => {
      expect(Array.from(turn.promptIds)).toEqual(Array.from(calls[i]!.inputIds));
      expect(Array.from(turn.outputIds)).toEqual(Array.from(calls[i]!.result.outputIds));
      expect(Array.from(turn.logprobs)).toEqual(Array.from(calls[i]!.result.logprobs));
    });
    // Per sample: the trained (mask 1) tokens are the turns' sampled tokens, in order, with their log
    // probs; nothing else is trained.
    const trained: number[] = [];
    const trainedLogprobs: number[] = [];
    for (const s of samples) {
      expect(s.metadata.agent).toBe(kind);
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
    // The token audit: every trained span is exactly one captured turn, nothing captured goes untrained.
    const audit = auditTokens(samples, turnLog);
    expect(audit.verdict, JSON.stringify(audit.samples.filter((a) => !a.ok))).toBe('pass');
    expect(audit.turns.matched).toBe(run.turns.length);
    return { run, reward, samples, engineCalls: calls.length, task };
  } finally {
    await sandbox.terminate();
    await proxy.close();
    await engine.close();
    await standIn.close();
    await pools.close();
    rmSync(work, { recursive: true, force: true });
  }
}
