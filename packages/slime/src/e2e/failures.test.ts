/**
 * Infrastructure failures behind slime: the bridge's real Python code inside a reconstruction of slime's
 * rollout step (test/slime_loop.py, THUDM/slime commit 624b824) against the TypeScript rollout server.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ConfigError, createSample, SandboxError } from '@vime/core';
import { parseSlimePerfLog } from '@vime/metrics';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type RolloutServer, startRolloutServer } from '../rollout-server.js';

const run = promisify(execFile);
const pythonDir = fileURLToPath(new URL('../../python/', import.meta.url));
const testDir = fileURLToPath(new URL('../__fixtures__/', import.meta.url));
// Debian's interpreter: python3-torch and python3-msgpack.
const PYTHON = '/usr/bin/python3';

interface LoopOutput {
  error?: string;
  groups: Array<{ group: number; size: number; rows: number[] }>;
  rows: Array<{
    index: number;
    group: number;
    rollout_id: number;
    reward: number;
    status: string;
    infra: unknown;
  }>;
  raw: number[];
  normalised: number[];
  default: { raw?: number[]; normalised?: number[]; error?: string };
  rm_calls: number[];
  perf_line: string;
  hook_skips_default: boolean;
}

let server: RolloutServer;
const attemptsByIndex = new Map<number, number>();

beforeAll(async () => {
  server = await startRolloutServer({
    concurrency: 16,
    attempts: 3,
    retryDelayMs: 5,
    rollout: async ({ sample }) => {
      const index = sample.index!;
      const tries = (attemptsByIndex.get(index) ?? 0) + 1;
      attemptsByIndex.set(index, tries);
      const kind = String(sample.metadata.kind);
      // The first sibling of a "broken" prompt fails on every attempt; a "flaky" one on its first only.
      const sibling = index % 4;
      if (kind === 'broken' && sibling === 0) throw new SandboxError('sandbox create failed: no space left');
      if (kind === 'flaky' && sibling === 0 && tries === 1) throw new SandboxError('sandbox vanished');
      if (kind === 'unmappable') throw new ConfigError('metadata is not a SWE-smith row');
      await new Promise((r) => setTimeout(r, kind === 'ok' ? 150 : 300));
      const reward = index % 3 === 0 ? 1 : 0;
      const row = (part: number) =>
        createSample({
          ...sample,
          rollout_id: sample.rollout_id ?? index,
          tokens: [1, 2, 3, 10 + part],
          response_length: 1,
          loss_mask: [1],
          rollout_log_probs: [-0.5],
          reward,
          status: 'completed',
          metadata: {
            ...sample.metadata,
            grade_outcome: 'tests_ran',
            hacks: index === 1 ? ['conftest_changed'] : [],
            vime_phases_ms: { agent: 10 * sibling, eval: 20 },
          },
        });
      return kind === 'fork' && sibling === 1 ? [row(0), row(1)] : [row(0)];
    },
  });
});
afterAll(() => server.close());
// Sample indices restart at 0 in every slime step below.
beforeEach(() => attemptsByIndex.clear());

async function slimeStep(spec: Record<string, unknown>): Promise<LoopOutput> {
  const { stdout } = await run(PYTHON, [`${testDir}slime_loop.py`, JSON.stringify(spec)], {
    env: {
      ...process.env,
      PYTHONPATH: `${pythonDir}:${testDir}`,
      VIME_ROLLOUT_URL: server.url,
      VIME_SAMPLE_CLASS: 'stand_in_sample:Sample',
    },
    timeout: 120_000,
  });
  return JSON.parse(stdout) as LoopOutput;
}

const prompts = (kinds: string[]) =>
  kinds.map((kind, group) => ({ id: `p${group}`, group, metadata: { kind } }));
const FILTER = 'vime_bridge.drop_infra_failed_groups';

describe('infrastructure failures never reach slime reward math', () => {
  it('drops exactly the groups holding a failed rollout, refills the batch, and normalises per group', async () => {
    const out = await slimeStep({
      batch: 4,
      n: 4,
      over_sampling: 5,
      filter: FILTER,
      // First round: two bad prompts among five; the refill brings the rest.
      prompts: prompts([
        'ok',
        'broken',
        'fork',
        'unmappable',
        'ok',
        'ok',
        'flaky',
        'ok',
        'ok',
        'ok',
        'ok',
        'ok',
      ]),
    });
    expect(out.error).toBeUndefined();
    // A full batch of complete groups, none holding a failure row, every reward a number.
    expect(out.groups).toHaveLength(4);
    expect(out.groups.map((g) => g.size)).toEqual([4, 4, 4, 4]);
    expect(out.groups.map((g) => g.group)).not.toContain(1);
    expect(out.groups.map((g) => g.group)).not.toContain(3);
    expect(out.rows.every((r) => r.infra === null && typeof r.reward === 'number')).toBe(true);
    expect(out.rm_calls).toEqual([]);
    // The forked rollout's two rows share its rollout id and its normalised reward.
    const fork = out.groups.find((g) => g.group === 2)!;
    expect(fork.rows).toEqual([1, 2, 1, 1]);
    const forkRows = out.rows
      .map((r, i) => ({ ...r, value: out.normalised[i]! }))
      .filter((r) => r.group === 2);
    expect(forkRows).toHaveLength(5);
    expect(forkRows[1]!.rollout_id).toBe(forkRows[2]!.rollout_id);
    expect(forkRows[1]!.value).toBe(forkRows[2]!.value);
    // Per group over rollouts: each group's four rollout values sum to ~0.
    for (const g of out.groups) {
      const seen = new Map<number, number>();
      out.rows.forEach((r, i) => {
        if (r.group === g.group) seen.set(r.rollout_id, out.normalised[i]!);
      });
      expect(seen.size).toBe(4);
      expect(Math.abs([...seen.values()].reduce((a, b) => a + b, 0))).toBeLessThan(1e-5);
    }
    // slime's default post-processing cannot reshape a batch with a fan-out into groups: it
    // normalises all 17 rows as one group, which is why the bridge ships its own.
    expect(out.rows).toHaveLength(17);
    expect(out.default.normalised).toHaveLength(17);
    expect(out.default.normalised).not.toEqual(out.normalised);
    // The drops are counted by slime (filter reason) and by the bridge (cause), in the perf line that
    // vime-metrics reads back.
    expect(out.hook_skips_default).toBe(false);
    const [step] = parseSlimePerfLog([out.perf_line]).steps;
    expect(step!.metrics).toMatchObject({
      'rollout/dynamic_filter/drop_vime_infra_failure': 2,
      'vime/infra_failed_groups': 2,
      'vime/infra_failure/sandbox_error': 1,
      'vime/infra_failure/invalid_config': 1,
      'vime/rollouts': 16,
    });
    expect(step!.metrics['vime/pass@1']).toBeGreaterThan(0);
    expect(step!.metrics['vime/pass@4']).toBeGreaterThanOrEqual(step!.metrics['vime/pass@1'] as number);
    expect(step!.metrics['vime/phase_ms/eval/p50']).toBe(20);
    // The broken rollout was tried three times, the unmappable one once (its input cannot improve).
    expect(attemptsByIndex.get(4)).toBe(3);
    expect(attemptsByIndex.get(12)).toBe(1);
    expect(server.stats().failed).toBeGreaterThanOrEqual(2);
  }, 180_000);

  it('without fan-out or failures, matches slime default post-processing exactly', async () => {
    const out = await slimeStep({
      batch: 3,
      n: 4,
      over_sampling: 3,
      filter: FILTER,
      prompts: prompts(['ok', 'ok', 'ok']),
    });
    expect(out.rows).toHaveLength(12);
    expect(out.normalised).toEqual(out.default.normalised);
    expect(out.raw).toEqual(out.default.raw);
  }, 120_000);

  it('a retried infrastructure failure costs nothing: the group is kept with the retried rollout', async () => {
    const out = await slimeStep({
      batch: 1,
      n: 4,
      over_sampling: 1,
      filter: FILTER,
      prompts: prompts(['flaky']),
    });
    expect(out.groups).toEqual([{ group: 0, size: 4, rows: [1, 1, 1, 1] }]);
    expect(out.rows.every((r) => r.status === 'completed')).toBe(true);
  }, 120_000);

  it('a slime run without the filter stops with the fix instead of training on a None reward', async () => {
    const out = await slimeStep({ batch: 1, n: 4, over_sampling: 1, prompts: prompts(['broken']) });
    expect(out.error).toMatch(
      /RolloutServerError: .*--dynamic-sampling-filter-path vime_bridge\.drop_infra_failed_groups/,
    );
  }, 120_000);
});
