import type { RolloutResult, ScoredRollout } from '@vime/core';
import { grpoAdvantages } from '@vime/grpo';
import { specDecodeScalars, stepSpecDecode, stepToolCallHealth } from '@vime/metrics';
import { describe, expect, it } from 'vitest';
import {
  type StepSummary,
  shuffledRewards,
  specDecodeLines,
  stampAdvantages,
  toolCallLines,
  toolCallScalars,
} from './steps.js';

const rollout = (toolCalls: Record<string, number> | undefined) =>
  ({
    status: 'completed',
    reward: 0,
    samples: [{ metadata: toolCalls ? { tool_calls: toolCalls } : {} }],
  }) as unknown as RolloutResult;

const step = (results: RolloutResult[]) =>
  ({ step: 2, toolCalls: stepToolCallHealth(results) }) as unknown as StepSummary;

describe("a step's tool-call health in the log and the sinks", () => {
  it('a healthy step: one line, no alarm', () => {
    const s = step([rollout({ emitted: 5, parsed: 5, malformed: 0, unknownTool: 0, badArguments: 0 })]);
    expect(toolCallLines(s)).toEqual([
      'step 2 tool calls: 5 emitted, 5 parsed, 0 malformed, 0 unknown tool, 0 bad arguments; 0/1 rollouts without a tool call',
    ]);
    expect(toolCallScalars(s.toolCalls)).toEqual({
      'tool_calls/emitted': 5,
      'tool_calls/parsed': 5,
      'tool_calls/malformed': 0,
      'tool_calls/unknown_tool': 0,
      'tool_calls/bad_arguments': 0,
      'tool_calls/failure_rate': 0,
      'tool_calls/no_tool_rollouts': 0,
    });
  });

  it('a step whose calls stop parsing: the counts and the alarm line', () => {
    const s = step([
      rollout({ emitted: 3, parsed: 0, malformed: 3, unknownTool: 0, badArguments: 0 }),
      rollout({ emitted: 2, parsed: 2, malformed: 0, unknownTool: 1, badArguments: 0 }),
    ]);
    const lines = toolCallLines(s);
    expect(lines[0]).toBe(
      'step 2 tool calls: 5 emitted, 2 parsed, 3 malformed, 1 unknown tool, 0 bad arguments; 1/2 rollouts without a tool call',
    );
    expect(lines[1]).toMatch(/^ALARM step 2: 80\.0% of 5 tool calls failed to parse or name a declared tool/);
    expect(toolCallScalars(s.toolCalls)['tool_calls/failure_rate']).toBe(0.8);
  });

  it('rollouts without tool-call counts (a text protocol) print nothing', () => {
    expect(toolCallLines(step([rollout(undefined)]))).toEqual([]);
    expect(toolCallScalars(undefined)).toEqual({});
  });
});

describe("a step's speculative decoding in the log and the sinks", () => {
  const specRollout = (spec: Record<string, number> | undefined) =>
    ({
      status: 'completed',
      reward: 0,
      samples: [{ metadata: spec ? { spec_decode: spec } : {} }],
    }) as unknown as RolloutResult;

  it('the rows summed: accepted draft tokens, verify passes and acceptance length as spec/* scalars and a line', () => {
    const spec = stepSpecDecode([
      specRollout({ verify_passes: 40, accepted_tokens: 80 }),
      specRollout({ verify_passes: 60, accepted_tokens: 70 }),
    ]);
    const s = { step: 3, spec } as unknown as StepSummary;
    expect(specDecodeScalars(s.spec)).toEqual({
      'spec/accepted_tokens': 150,
      'spec/verify_passes': 100,
      'spec/accept_length': 2.5,
    });
    expect(specDecodeLines(s)).toEqual([
      'step 3 speculative decoding: 150 accepted draft tokens over 100 verify passes, acceptance length 2.50 (responses)',
    ]);
  });

  it('a step without counts writes no spec scalar and no line (never 0)', () => {
    const s = { step: 3, spec: stepSpecDecode([specRollout(undefined)]) } as unknown as StepSummary;
    expect(specDecodeScalars(s.spec)).toEqual({});
    expect(specDecodeLines(s)).toEqual([]);
  });
});

describe('the shuffled-reward control', () => {
  const scored = (rewards: number[], groupSize: number) =>
    rewards.map(
      (reward, i) =>
        ({
          status: 'completed',
          reward,
          groupIndex: Math.floor(i / groupSize),
          samples: [
            { reward, metadata: {} },
            { reward, metadata: {} },
          ],
        }) as unknown as ScoredRollout,
    );
  const earned = [1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0.5, 0, 1, 0];
  const sorted = (xs: readonly number[]) => [...xs].sort((a, b) => a - b);

  it('permutes each step with its own seeded permutation: the multiset of rewards is the step’s own', () => {
    const a = shuffledRewards(earned, 11, 1);
    expect(sorted(a)).toEqual(sorted(earned));
    expect(a).not.toEqual(earned);
    expect(shuffledRewards(earned, 11, 1)).toEqual(a);
    expect(shuffledRewards(earned, 11, 2)).not.toEqual(a);
    expect(shuffledRewards(earned, 12, 1)).not.toEqual(a);
    for (let step = 1; step <= 20; step++)
      expect(sorted(shuffledRewards(earned, 3, step))).toEqual(sorted(earned));
  });

  it('computes the advantages on the shuffled rewards, writes them as the rows’ rewards, keeps the earned ones', () => {
    const rollouts = scored(earned, 4);
    const { rows, nonZero } = stampAdvantages(rollouts, { seed: 11, step: 1 });
    const shuffled = shuffledRewards(earned, 11, 1);
    const expected = grpoAdvantages(shuffled, {
      groups: rollouts.map((r) => r.groupIndex),
      preset: 'slime',
      allowUnevenGroups: true,
    });
    expect(rows).toHaveLength(earned.length * 2);
    rows.forEach((row, k) => {
      const i = Math.floor(k / 2);
      expect(row.metadata.advantage).toBe(expected[i]);
      expect(row.reward).toBe(shuffled[i]);
      expect(row.metadata.true_reward).toBe(earned[i]);
    });
    expect(nonZero).toBe(expected.filter((a) => a !== 0).length);
    // The earned rewards give other advantages: the first group (all 1) has none, shuffled it has some.
    const plain = stampAdvantages(scored(earned, 4));
    expect(plain.rows.map((r) => r.metadata.advantage)).not.toEqual(rows.map((r) => r.metadata.advantage));
    expect(plain.rows.every((r) => r.metadata.true_reward === undefined)).toBe(true);
    expect(plain.rows.map((r) => r.reward)).toEqual(earned.flatMap((x) => [x, x]));
  });
});
