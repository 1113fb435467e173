/**
 * One request of the rollout server: the slime sample's SWE-smith row as a task, its sampling params over
 * the run's, one coding-agent rollout, a metrics line per attempt, and the rollout's rows stamped with the
 * sample's ids. Infrastructure failures throw (the server retries them, then answers a failure row); the
 * agent's own failures are graded rows.
 */
import { createSample, type RolloutResult, type Sample, type TaskSpec, VimeError } from '@vime/core';
import type { RolloutContext, RolloutOutcome } from '@vime/core/runner';
import { auditRolloutRows, type Config, loopRollout } from '@vime/loop';
import { rolloutRecordOf } from '@vime/metrics/sinks';
import { rowToTask, SweSmithRowSchema } from '@vime/swe';
import type { BridgeRollout, RolloutRequest } from '../rollout-server.js';
import type { ServeServices } from './services.js';

/**
 * A row of the dataset is graded as it is there; one slime sends that the dataset lacks is mapped as given.
 * The sample's own `metadata.agent`, when set, picks its agent either way.
 */
function taskOf(config: Config, known: Map<string, TaskSpec>, metadata: Record<string, unknown>): TaskSpec {
  const row = SweSmithRowSchema.parse(metadata);
  const task =
    known.get(row.instance_id) ?? rowToTask(row, config.poolSuffix ? { runSuffix: config.poolSuffix } : {});
  return row.agent === undefined ? task : { ...task, metadata: { ...task.metadata, agent: row.agent } };
}

/** The rollout context of one request: phases timed into `phasesMs`, events dropped. */
function contextOf(
  ref: Omit<
    RolloutResult,
    'status' | 'timings' | 'metadata' | 'turns' | 'startedAt' | 'endedAt' | 'error' | 'reward'
  >,
  signal: AbortSignal,
  phasesMs: Record<string, number>,
): RolloutContext {
  return {
    ...ref,
    signal,
    emit: () => {},
    phase: async (name, fn) => {
      const start = performance.now();
      try {
        return await fn();
      } finally {
        phasesMs[name] = (phasesMs[name] ?? 0) + performance.now() - start;
      }
    },
  };
}

export function bridgeRollout(config: Config, services: ServeServices): BridgeRollout {
  const { proxy, pools, sinks, known, turns } = services;
  const record = (step: number, result: RolloutResult) => void sinks.rollout(rolloutRecordOf(step, result));
  return async ({ sample, samplingParams, signal }: RolloutRequest): Promise<Sample[]> => {
    const task = taskOf(config, known, sample.metadata);
    const sampling = {
      ...config,
      temperature: Number(samplingParams.temperature ?? config.temperature),
      topP: Number(samplingParams.top_p ?? config.topP),
      maxTokensPerTurn: Number(samplingParams.max_new_tokens ?? config.maxTokensPerTurn),
    };
    const rollout = loopRollout({ config: sampling, proxy, pools, model: 'policy' });
    // Every row of one rollout carries its id, so slime counts the rollout once.
    const ids = {
      group_index: sample.group_index,
      index: sample.index,
      rollout_id: sample.rollout_id ?? sample.index,
    };
    const base = {
      taskId: task.id,
      groupIndex: sample.group_index ?? 0,
      sampleIndex: sample.index ?? 0,
      rolloutId: ids.rollout_id ?? 0,
      samples: [],
    };
    const phasesMs: Record<string, number> = {};
    const startedAt = Date.now();
    let outcome: RolloutOutcome;
    try {
      outcome = await rollout(task, contextOf(base, signal, phasesMs));
      // The rows are checked against the turns the proxy captured before slime gets them: a mismatch is
      // an infrastructure failure (the server tries again), never trained.
      const mismatch = auditRolloutRows({ ...base, samples: outcome.samples ?? [] }, turns);
      if (mismatch) throw mismatch;
    } catch (error) {
      // Each failed attempt is a line of its own (the server retries it in a fresh sandbox).
      if (!signal.aborted) {
        const code = VimeError.isInstance(error) ? error.code : 'rollout_error';
        const failure = { code, message: (error as Error).message };
        record(base.rolloutId, {
          ...base,
          status: 'failed',
          error: failure,
          timings: phasesMs,
          metadata: {},
          turns: 0,
          startedAt,
          endedAt: Date.now(),
        });
      }
      throw error;
    }
    record(base.rolloutId, {
      ...base,
      status: outcome.status ?? 'completed',
      reward: outcome.reward,
      turns: outcome.turns ?? 0,
      timings: { ...phasesMs, ...outcome.timings },
      metadata: outcome.metadata ?? {},
      startedAt,
      endedAt: Date.now(),
    });
    return (outcome.samples ?? []).map((row) =>
      createSample({
        ...row,
        ...ids,
        prompt: sample.prompt,
        label: sample.label,
        metadata: { ...sample.metadata, ...row.metadata, vime_phases_ms: phasesMs },
      }),
    );
  };
}
