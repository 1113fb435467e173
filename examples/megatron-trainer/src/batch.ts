import { createSample, type Sample } from '@vime/core';
import { seededRandom } from '@vime/core/utils';

export interface DemoBatchOptions {
  /** Token ids are drawn from `[0, vocabSize)`; the trainer's model must have at least this vocabulary. */
  vocabSize?: number | undefined;
  /** Raw rewards, one array per prompt group; every group has the same length (slime's `n_samples_per_prompt`). */
  groups?: number[][] | undefined;
  /** Seed of the deterministic generator. */
  seed?: number | undefined;
}

/**
 * Mixed rewards: a binary group with two winners, a uniform group (every advantage is exactly 0),
 * a mostly-right group and a continuous-reward group.
 */
export const DEFAULT_GROUPS: number[][] = [
  [1, 0, 0, 1],
  [0, 0, 0, 0],
  [1, 1, 0, 1],
  [0.25, 1, 0, 0.5],
];

/**
 * A batch of multi-turn coding-agent-shaped samples for the trainer demo, built with `createSample`.
 *
 * Tokens come from a uniform policy over the vocabulary, so every trainable token's rollout log
 * prob is `-ln(vocabSize)` plus up to ±0.02 of engine/trainer mismatch: a freshly initialised model
 * predicts nearly uniform tokens, so the first step's importance ratio starts close to 1, as it would
 * for an engine serving the trainer's own weights. Some responses contain a tool-observation span
 * (loss mask 0, log prob 0.0, as slime's `append_response_tokens(trainable=False)` writes them), some
 * end in one, and one per group is truncated.
 */
export function makeDemoBatch(options: DemoBatchOptions = {}): Sample[] {
  const vocabSize = options.vocabSize ?? 1000;
  const groups = options.groups ?? DEFAULT_GROUPS;
  const random = seededRandom(options.seed ?? 20261130);
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const uniformLogProb = -Math.log(vocabSize);

  const samples: Sample[] = [];
  groups.forEach((rewards, group) => {
    const prompt = Array.from({ length: int(12, 28) }, () => int(0, vocabSize - 1));
    rewards.forEach((reward, k) => {
      // Response = model turn, then optionally [tool observation, model turn], then maybe a trailing observation.
      const spans: Array<{ length: number; trainable: boolean }> = [{ length: int(10, 40), trainable: true }];
      if (k % 2 === 1)
        spans.push({ length: int(4, 12), trainable: false }, { length: int(6, 20), trainable: true });
      if (k === 2) spans.push({ length: int(3, 8), trainable: false });
      const response: number[] = [];
      const mask: number[] = [];
      const logProbs: number[] = [];
      for (const span of spans) {
        for (let i = 0; i < span.length; i++) {
          response.push(int(0, vocabSize - 1));
          mask.push(span.trainable ? 1 : 0);
          logProbs.push(span.trainable ? uniformLogProb + (random() - 0.5) * 0.04 : 0);
        }
      }
      samples.push(
        createSample({
          group_index: group,
          index: samples.length,
          prompt: `task ${group}: make the failing tests pass`,
          tokens: [...prompt, ...response],
          response: `attempt ${k} (${spans.length} spans)`,
          response_length: response.length,
          reward,
          loss_mask: mask,
          rollout_log_probs: logProbs,
          weight_versions: ['0'],
          status: k === 3 ? 'truncated' : 'completed',
          metadata: { task_id: `demo-${group}` },
        }),
      );
    });
  });
  return samples;
}
