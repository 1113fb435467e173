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
import type { Sample, ScoredRollout, TaskSpec, Turn } from '@vime/core';
import { type Engine, type GenerateResult, loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { type AuditTurn, auditHandoff, auditTurnOf } from '@vime/grpo';
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
import { type Fix, fixOf, oneLineFix, type Script, toolResultsIn } from '../standin.js';

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

/** A captured turn and the trajectory that recorded it (the turn event's `trajectoryId`). */
export interface CapturedTurnOf {
  trajectoryId: string;
  turn: Turn;
}

export interface E2eOutcome {
  run: HarnessRun;
  reward: number | undefined;
  samples: Sample[];
  engineCalls: number;
  /** Output tokens the engine sampled over every call. */
  sampledTokens: number;
  /** Every captured turn of the session, each thread's, in the order they were recorded. */
  captured: CapturedTurnOf[];
  /** The task it ran (its prompt as the harness was given it). */
  task: TaskSpec;
}

/** What a run may change: a policy that reads the whole prompt, the harness's environment and tools. */
export interface E2eOptions {
  /** Replaces the script: the reply to a Qwen3-rendered prompt (a stand-in policy, not a model). */
  policy?: ((prompt: string, fix: Fix) => string | Promise<string>) | undefined;
  env?: Record<string, string> | undefined;
  tools?: readonly string[] | undefined;
  codexConfig?: Record<string, string | number | boolean> | undefined;
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
  options: E2eOptions = {},
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
    policy: ({ prompt }) => (options.policy ? options.policy(prompt, fix) : script(toolResultsIn(prompt), fix)),
  });
  const calls: Call[] = [];
  const engine = sglangEngine(standIn.url);
  const socketPath = join(work, 'proxy.sock');
  const proxy = await startCaptureProxy({ engine: recording(engine, calls), tokenizer, socketPath });
  // The turn log as a run keeps it for the hand-off audit: per trajectory, each turn linked to the last.
  const captured: CapturedTurnOf[] = [];
  const turnLog = new Map<string, AuditTurn[]>();
  proxy.events.on('turn', (e) => {
    captured.push({ trajectoryId: e.trajectoryId, turn: e.turn });
    const list = turnLog.get(e.trajectoryId) ?? [];
    list.push(auditTurnOf(e.trajectoryId, e.turn, list.at(-1)));
    turnLog.set(e.trajectoryId, list);
  });
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
      env: options.env,
      tools: options.tools,
      codexConfig: options.codexConfig,
    });
    expect(run.timedOut, run.stderr).toBe(false);
    expect(run.exitCode, run.stderr).toBe(0);
    const patch = await captureAgentPatch(swe);
    await sandbox.terminate();
    const graded = await gradeInFreshSandbox(pools, task, patch);
    const reward = graded.status === 'graded' ? graded.reward : undefined;
    const samples = proxy.finishSession(sessionId, {
      reward: reward ?? 0,
      baseSample: { metadata: { agent: kind } },
    });
    checkTokens(kind, sessionId, samples, captured, calls, turnLog);
    const sampledTokens = calls.reduce((n, c) => n + c.result.outputIds.length, 0);
    return { run, reward, samples, engineCalls: calls.length, sampledTokens, captured, task };
  } finally {
    await sandbox.terminate();
    await proxy.close();
    await engine.close();
    await standIn.close();
    await pools.close();
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Per turn: the proxy recorded exactly a prompt the engine was sent and what it sampled (each engine call
 * once). Per trajectory (a session's thread): its samples' trained (mask 1) tokens are its turns' sampled
 * tokens, in order, with their log probs; nothing else is trained. Then the hand-off audit a run applies
 * (`auditHandoff`) passes on the rollout.
 */
function checkTokens(
  kind: HarnessKind,
  sessionId: string,
  samples: readonly Sample[],
  captured: readonly CapturedTurnOf[],
  calls: readonly Call[],
  turnLog: ReadonlyMap<string, AuditTurn[]>,
): void {
  expect(captured.length).toBe(calls.length);
  const unmatched = [...calls];
  for (const { turn } of captured) {
    const at = unmatched.findIndex(
      (c) =>
        sameIds(c.inputIds, turn.promptIds) &&
        sameIds(c.result.outputIds, turn.outputIds) &&
        sameIds(c.result.logprobs, turn.logprobs),
    );
    expect(at, `turn ${turn.index} is no engine call`).toBeGreaterThanOrEqual(0);
    unmatched.splice(at, 1);
  }
  const trajectories = [...new Set(captured.map((c) => c.trajectoryId))];
  expect(new Set(samples.map((s) => s.session_id))).toEqual(new Set(trajectories));
  for (const id of trajectories) {
    const trained: number[] = [];
    const trainedLogprobs: number[] = [];
    for (const s of samples.filter((x) => x.session_id === id)) {
      expect(s.metadata.agent).toBe(kind);
      const start = s.tokens.length - s.response_length;
      s.loss_mask!.forEach((m, j) => {
        if (m === 1) {
          trained.push(s.tokens[start + j]!);
          trainedLogprobs.push(s.rollout_log_probs![j]!);
        }
      });
    }
    const turns = captured.filter((c) => c.trajectoryId === id).map((c) => c.turn);
    expect(trained).toEqual(turns.flatMap((t) => Array.from(t.outputIds)));
    expect(trainedLogprobs).toEqual(turns.flatMap((t) => Array.from(t.logprobs)));
  }
  const rollout: ScoredRollout = {
    taskId: kind,
    groupIndex: 0,
    sampleIndex: 0,
    rolloutId: samples[0]?.rollout_id ?? 0,
    sessionId,
    samples: [...samples],
    status: 'completed',
    reward: Number(samples[0]?.metadata.rollout_reward ?? 0),
    turns: captured.length,
    timings: {},
    metadata: {},
  };
  const { passed, failed, audit } = auditHandoff([rollout], (ids) => ids.flatMap((id) => turnLog.get(id) ?? []));
  expect(failed.map((f) => f.failure.error.message)).toEqual([]);
  expect(passed).toHaveLength(1);
  expect(audit.tokens).toBe(captured.reduce((n, c) => n + c.turn.outputIds.length, 0));
}

function sameIds(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
