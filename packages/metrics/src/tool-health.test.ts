import type { RolloutResult } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { renderHtmlReport } from './html.js';
import { runReport } from './report.js';
import { stepToolCallHealth, toolCallAlarm, toolCallLine } from './tool-health.js';

const scored = (toolCalls: unknown, index = 0): RolloutResult =>
  ({
    status: 'completed',
    taskId: 't',
    groupIndex: 0,
    sampleIndex: index,
    reward: 0,
    rolloutId: index,
    turns: 1,
    timings: {},
    metadata: {},
    samples: [{ metadata: toolCalls === undefined ? {} : { tool_calls: toolCalls } }],
  }) as unknown as RolloutResult;

describe('tool-call health of a step', () => {
  it('sums the rollouts, counts rollouts without a parsed call, and the failure rate', () => {
    const health = stepToolCallHealth([
      scored({ emitted: 4, parsed: 3, malformed: 1, unknownTool: 1, badArguments: 0 }),
      scored({ emitted: 2, parsed: 0, malformed: 2, unknownTool: 0, badArguments: 0 }),
      scored({ emitted: 0, parsed: 0, malformed: 0, unknownTool: 0, badArguments: 0 }),
      scored(undefined), // rows without counts (another parser): counted nowhere
      {
        status: 'failed',
        taskId: 't',
        groupIndex: 0,
        sampleIndex: 4,
        error: new Error('x'),
      } as unknown as RolloutResult,
    ]);
    expect(health).toEqual({
      emitted: 6,
      parsed: 3,
      malformed: 3,
      unknownTool: 1,
      badArguments: 0,
      rollouts: 3,
      noToolRollouts: 2,
      failureRate: 4 / 6,
    });
    expect(toolCallLine(health)).toBe(
      'tool calls: 6 emitted, 3 parsed, 3 malformed, 1 unknown tool, 0 bad arguments; 2/3 rollouts without a tool call',
    );
  });

  it('the alarm fires past the threshold only', () => {
    const healthy = stepToolCallHealth([
      scored({ emitted: 20, parsed: 20, malformed: 0, unknownTool: 2, badArguments: 0 }),
    ]);
    expect(healthy.failureRate).toBe(0.1);
    expect(toolCallAlarm(3, healthy)).toBeUndefined();
    const sick = stepToolCallHealth([
      scored({ emitted: 20, parsed: 17, malformed: 3, unknownTool: 0, badArguments: 0 }),
    ]);
    expect(toolCallAlarm(3, sick)).toBe(
      'ALARM step 3: 15.0% of 20 tool calls failed to parse or name a declared tool (threshold 10.0%): 3 malformed, 0 unknown tool, 0 bad arguments. Check that the harness and the proxy use the same tool-call format.',
    );
    expect(toolCallAlarm(3, sick, 0.2)).toBeUndefined();
    expect(toolCallAlarm(1, stepToolCallHealth([]))).toBeUndefined();
  });

  it('counts that are not numbers count as 0', () => {
    const health = stepToolCallHealth([scored({ emitted: '4', parsed: -1, malformed: Number.NaN })]);
    expect(health).toMatchObject({ emitted: 0, parsed: 0, malformed: 0, rollouts: 1, noToolRollouts: 1 });
  });
});

describe('the report’s tool-call section', () => {
  it('counts each step and the run, marks the step past the alarm, and says why when no rollout has counts', () => {
    const results = [
      {
        step: 1,
        results: [scored({ emitted: 10, parsed: 10, malformed: 0, unknownTool: 0, badArguments: 0 })],
      },
      {
        step: 2,
        results: [scored({ emitted: 10, parsed: 7, malformed: 3, unknownTool: 0, badArguments: 1 })],
      },
      { step: 3, results: [scored(undefined)] },
    ];
    const record = runReport({ results });
    expect(record.tool_calls?.steps.map((s) => [s.step, s.emitted, s.parsed, s.failureRate])).toEqual([
      [1, 10, 10, 0],
      [2, 10, 7, 0.4],
    ]);
    expect(record.tool_calls?.total).toMatchObject({
      emitted: 20,
      parsed: 17,
      rollouts: 2,
      failureRate: 0.2,
    });
    const html = renderHtmlReport(record);
    expect(html).toContain('Tool-call health');
    expect(html).toMatch(/Alarm:<\/strong> more than 10\.0% of the tool calls failed in step 2:/);
    expect(runReport({ results: [results[2]!] }).absent.tool_calls).toMatch(
      /no rollout carries tool-call counts/,
    );
  });
});
