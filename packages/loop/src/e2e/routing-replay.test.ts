/**
 * MoE routing replay (R3) through a whole run, with the stand-in engine (a scripted policy, not a model)
 * reporting a made-up routing: the turn log records the routing that sampled each output, every row the
 * trainer gets carries `rollout_routed_experts` in slime's layout, and the hand-off audit passes them.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CapturedTurnSchema, decodeSamples } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConfig } from '../config/resolve.js';
import { runLoop } from '../loop.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-routing-replay-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('routing replay in a run', () => {
  it('every row the trainer gets carries the engine’s routing of its tokens, and the audit passes them', {
    timeout: 300_000,
  }, async () => {
    const out = join(tmp, 'run');
    const config = checkConfig({
      out,
      mode: 'sync',
      steps: 1,
      promptsPerStep: 2,
      samplesPerPrompt: 2,
      concurrency: 4,
      validate: false,
      quiet: true,
      poolReplicas: 2,
      routingReplayLayers: 2,
      routingReplayTopK: 2,
    });
    const summary = await runLoop(config, { log: () => {} });
    expect(summary.steps[0]!.audit).toMatchObject({ rollouts: 4, failedRollouts: 0 });

    const turns = (await readFile(join(out, 'turns.jsonl'), 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => CapturedTurnSchema.parse(JSON.parse(l)));
    expect(turns.length).toBeGreaterThanOrEqual(4);
    for (const t of turns) {
      expect(t.routed_experts).toMatchObject({ layers: 2, top_k: 2, start: t.prompt_ids.length - 1 });
      expect(t.routed_experts!.experts).toHaveLength(t.output_ids.length * 4);
    }

    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    expect(rows.length).toBeGreaterThanOrEqual(4);
    for (const row of rows) {
      const routes = row.rollout_routed_experts!;
      expect(routes).toHaveLength(row.tokens.length - 1);
      for (const position of routes) {
        expect(position).toHaveLength(2);
        for (const layer of position) {
          expect(layer).toHaveLength(2);
          for (const expert of layer) expect(expert >= 0 && expert < 8).toBe(true);
        }
      }
    }
  });

  it('refuses half a routing shape, naming both knobs', async () => {
    const config = checkConfig({ out: join(tmp, 'half'), quiet: true, routingReplayLayers: 2 });
    await expect(runLoop(config, { log: () => {} })).rejects.toThrow(
      /routing replay needs both engines\.routing_replay\.layers and engines\.routing_replay\.top_k/,
    );
  });
});
