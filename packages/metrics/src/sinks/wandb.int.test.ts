import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { wandbLogChunks, wandbOfflineSink, wandbRunId } from './wandb.js';

const READER = fileURLToPath(new URL('../../scripts/read_wandb.py', import.meta.url));
const T0 = Date.UTC(2026, 7, 21, 10, 0, 0, 250);

// biome-ignore lint/suspicious/noExplicitAny: the JSON of decoded records, checked field by field below
async function read(path: string): Promise<Array<Record<string, any>>> {
  const { stdout } = await promisify(execFile)('/usr/bin/python3', [READER, path], {
    maxBuffer: 64 << 20,
  });
  return stdout
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
}

const valuesOf = (items: Array<{ key: string; value_json: string }>) =>
  Object.fromEntries(items.map((i) => [i.key, JSON.parse(i.value_json)]));

describe('Weights & Biases offline run', () => {
  it("is read back by protobuf's own runtime with every chunk's CRC checked, across block boundaries", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-wandb-'));
    // A 100 KB config value spans blocks (FIRST, MIDDLE, LAST); 400 steps cross many block ends.
    const config = { model: 'Qwen/Qwen3-0.6B', notes: 'x'.repeat(100_000), samplesPerPrompt: 8 };
    const sink = await wandbOfflineSink(
      dir,
      { runId: 'run 2026/08/21', startedAt: T0, config, engine: 'stand-in engine, not a model' },
      { project: 'coding-agent' },
    );
    expect(sink.runDir).toBe(join(dir, 'offline-run-20260821_100000-run-2026-08-21'));
    expect(readdirSync(sink.runDir).sort()).toEqual(['files', 'run-run-2026-08-21.wandb']);
    for (let step = 1; step <= 400; step++)
      await sink.step({
        step,
        t: T0 + step * 1000,
        scalars: { 'rollout/reward_mean': step / 400, 'rollout/pass@1': 0.5, 'perf/nothing': null },
      });
    await sink.close({ 'rollout/reward_mean': 1, 'perf/nothing': null });

    const records = await read(sink.path);
    expect(records.map((r) => Number(r.num))).toEqual(records.map((_, i) => i + 1));
    expect(Object.keys(records[0]!)).toEqual(['num', 'header']);
    const run = records[1]!.run;
    expect(run).toMatchObject({
      run_id: 'run-2026-08-21',
      project: 'coding-agent',
      display_name: 'run 2026/08/21',
      start_time: { seconds: String(Math.floor(T0 / 1000)), nanos: 250_000_000 },
    });
    expect(valuesOf(run.config.update)).toEqual({ ...config, engine: 'stand-in engine, not a model' });
    const history = records.filter((r) => r.history).map((r) => r.history);
    expect(history).toHaveLength(400);
    expect(history[399].step).toEqual({ num: '400' });
    // Only finite scalars are written; null (no value this step) is left out, never written as 0.
    expect(valuesOf(history[399].item)).toEqual({
      _step: 400,
      _runtime: 400,
      _timestamp: (T0 + 400_000) / 1000,
      'rollout/reward_mean': 1,
      'rollout/pass@1': 0.5,
    });
    const [summary, exit, final] = records.slice(-3);
    expect(valuesOf(summary!.summary.update)).toEqual({ 'rollout/reward_mean': 1 });
    expect(exit!.exit).toMatchObject({ runtime: expect.any(Number) });
    expect(final).toHaveProperty('final');
    expect(JSON.parse(readFileSync(join(sink.runDir, 'files', 'wandb-summary.json'), 'utf8'))).toMatchObject({
      'rollout/reward_mean': 1,
    });

    // A flipped byte anywhere in a record is caught.
    const bad = readFileSync(sink.path);
    bad[40_000]! ^= 0xff;
    const badPath = join(dir, 'bad.wandb');
    writeFileSync(badPath, bad);
    await expect(read(badPath)).rejects.toThrow(/bad checksum in the chunk at/);
  });

  it('never starts a chunk in the last 6 bytes of a block: they are zero padding', () => {
    const offset = 32 * 1024 - 5;
    const framed = wandbLogChunks([Uint8Array.of(1, 2, 3)], offset);
    expect([...framed.subarray(0, 5)]).toEqual([0, 0, 0, 0, 0]);
    expect(framed.length).toBe(5 + 7 + 3);
    expect(framed[5 + 6]).toBe(1); // FULL, at the start of the next block
    // Exactly 7 bytes left: an empty FIRST chunk fills them, the data follows in the next block.
    const seven = wandbLogChunks([Uint8Array.of(9)], 32 * 1024 - 7);
    expect([seven[6], seven[7 + 6]]).toEqual([2, 4]);
  });

  it('makes a run id W&B accepts from any run id', () => {
    expect(wandbRunId('2026-08-21T10:00:00.000Z')).toBe('2026-08-21T10-00-00-000Z');
    expect(wandbRunId('')).toBe('run');
  });
});
