import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { RolloutResult } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { rolloutMetrics } from '../rollout.js';
import { crc32c, maskedCrc32c } from './crc32c.js';
import { JSONL_SCHEMA, jsonlSink } from './jsonl.js';
import { fanOut, type MetricSink, rolloutRecordOf, stepRecordOf } from './sink.js';
import { TFEVENTS_FILE_VERSION, tensorboardSink } from './tfevents.js';

const READER = fileURLToPath(new URL('../../scripts/read_tfevents.py', import.meta.url));
const T0 = Date.UTC(2026, 7, 21, 10, 0, 0);

const results: RolloutResult[] = [
  {
    taskId: 'a',
    groupIndex: 0,
    sampleIndex: 0,
    rolloutId: 0,
    samples: [],
    turns: 4,
    timings: { claim: 12.4, eval: 900 },
    startedAt: 1000,
    endedAt: 3500,
    metadata: { hacks: ['test_edit'] },
    status: 'completed',
    reward: 0,
  },
  {
    taskId: 'a',
    groupIndex: 0,
    sampleIndex: 1,
    rolloutId: 1,
    samples: [],
    turns: 2,
    timings: {},
    metadata: {},
    status: 'failed',
    error: { code: 'sandbox_error', message: 'gone', phase: 'exec' },
  },
];

/** An independent varint/field walk over one protobuf message: field number -> raw values. */
function fields(buf: Uint8Array): Map<number, Array<bigint | Uint8Array>> {
  const out = new Map<number, Array<bigint | Uint8Array>>();
  let at = 0;
  const varint = () => {
    let v = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const b = buf[at++]!;
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < buf.length) {
    const key = Number(varint());
    const [field, wire] = [key >> 3, key & 7];
    const take = (n: number) => {
      at += n;
      return buf.slice(at - n, at);
    };
    let value: bigint | Uint8Array;
    if (wire === 0) value = varint();
    else if (wire === 1) value = take(8);
    else if (wire === 5) value = take(4);
    else if (wire === 2) value = take(Number(varint()));
    else throw new Error(`wire type ${wire}`);
    out.set(field, [...(out.get(field) ?? []), value]);
  }
  return out;
}

/** Every TFRecord of a file, each CRC checked. */
function records(file: Uint8Array): Uint8Array[] {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const out: Uint8Array[] = [];
  for (let at = 0; at < file.length; ) {
    const length = Number(view.getBigUint64(at, true));
    expect(view.getUint32(at + 8, true), `length CRC at ${at}`).toBe(maskedCrc32c(file.subarray(at, at + 8)));
    const data = file.subarray(at + 12, at + 12 + length);
    expect(view.getUint32(at + 12 + length, true), `data CRC at ${at}`).toBe(maskedCrc32c(data));
    out.push(data);
    at += 16 + length;
  }
  return out;
}

async function writeRun(dir: string): Promise<{ tbPath: string; jsonlPath: string }> {
  const run = { runId: 'ca-x', startedAt: T0, engine: 'stand-in engine, not a model', config: { steps: 2 } };
  const jsonlPath = join(dir, 'metrics.jsonl');
  const tb = await tensorboardSink(join(dir, 'tb'), run);
  const sink: MetricSink = fanOut([await jsonlSink(jsonlPath, run), tb]);
  for (const step of [1, 2]) {
    for (const r of results) await sink.rollout(rolloutRecordOf(step, r, T0 + step * 1000));
    const m = rolloutMetrics(results, { correct: (r) => r === 1, bootstrap: false });
    await sink.step(
      stepRecordOf(step, m, { 'perf/rollout_time': 10 * step, 'perf/nothing': null }, T0 + step * 1000),
    );
  }
  await sink.close({ 'rollout/reward_mean': 0 });
  return { tbPath: tb.path, jsonlPath };
}

describe('metric sinks', () => {
  it('computes CRC-32C as the TFRecord spec does', () => {
    expect(crc32c(new TextEncoder().encode('123456789'))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
  });

  it('appends a resumed start after the lines of the killed one, cutting off the line it tore', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-sinks-'));
    const path = join(dir, 'metrics.jsonl');
    const first = await jsonlSink(path, { runId: 'ca-1', startedAt: T0 }, { append: true });
    await first.rollout(rolloutRecordOf(1, results[0]!, T0 + 1000));
    // Killed in the middle of its next line.
    writeFileSync(path, `${readFileSync(path, 'utf8')}{"kind":"rollout","step":1,"ta`);
    const second = await jsonlSink(path, { runId: 'ca-1', startedAt: T0 + 5000 }, { append: true });
    await second.rollout(rolloutRecordOf(1, results[1]!, T0 + 6000));
    await second.close();
    const lines = readFileSync(path, 'utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.kind)).toEqual(['run', 'rollout', 'run', 'rollout', 'end']);
    expect(lines[2].started_at).toBe(new Date(T0 + 5000).toISOString());
    // Without append a sink starts its file anew.
    await (await jsonlSink(path, { runId: 'ca-2', startedAt: T0 })).close();
    expect(readFileSync(path, 'utf8').trimEnd().split('\n')).toHaveLength(2);
  });

  it('writes JSONL a reader takes line by line: run, rollouts, steps, end; a failure has no reward', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-sinks-'));
    const { jsonlPath } = await writeRun(dir);
    const lines = readFileSync(jsonlPath, 'utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.kind)).toEqual([
      'run',
      'rollout',
      'rollout',
      'step',
      'rollout',
      'rollout',
      'step',
      'end',
    ]);
    expect(lines[0]).toMatchObject({
      schema: JSONL_SCHEMA,
      run_id: 'ca-x',
      started_at: '2026-08-21T10:00:00.000Z',
    });
    expect(lines[1]).toMatchObject({
      step: 1,
      task_id: 'a',
      status: 'completed',
      reward: 0,
      duration_ms: 2500,
      phases_ms: { claim: 12, eval: 900 },
      hacks: ['test_edit'],
      error: null,
    });
    expect(lines[2]).toMatchObject({ status: 'failed', reward: null, error: 'sandbox_error (exec)' });
    expect(lines[3].scalars).toMatchObject({
      'rollout/failed': 1,
      'perf/rollout_time': 10,
      'perf/nothing': null,
    });
  });

  it('writes TensorBoard event files whose every record decodes with valid CRCs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-sinks-'));
    const { tbPath } = await writeRun(dir);
    expect(tbPath).toMatch(/\/events\.out\.tfevents\.\d{10}\.[^/]+\.vime$/);
    const events = records(new Uint8Array(readFileSync(tbPath))).map(fields);
    expect(events).toHaveLength(3);
    expect(new TextDecoder().decode(events[0]!.get(3)![0] as Uint8Array)).toBe(TFEVENTS_FILE_VERSION);
    const wall = new DataView((events[1]!.get(1)![0] as Uint8Array).buffer).getFloat64(0, true);
    expect(wall).toBe(T0 / 1000 + 1);
    expect(events.map((e) => e.get(2)![0])).toEqual([0n, 1n, 2n]);
    const values =
      (events[2]!.get(5)![0] as Uint8Array) && fields(events[2]!.get(5)![0] as Uint8Array).get(1)!;
    const scalars = Object.fromEntries(
      values.map((v) => {
        const f = fields(v as Uint8Array);
        const tag = new TextDecoder().decode(f.get(1)![0] as Uint8Array);
        return [tag, new DataView((f.get(2)![0] as Uint8Array).buffer).getFloat32(0, true)];
      }),
    );
    // Only finite scalars are written; null (no value this step) is left out, never written as 0.
    expect(scalars).toMatchObject({ 'perf/rollout_time': 20, 'rollout/failed': 1, 'rollout/reward_mean': 0 });
    expect('perf/nothing' in scalars).toBe(false);

    // A flipped byte is caught by the CRC.
    const bad = new Uint8Array(readFileSync(tbPath));
    bad[bad.length - 6]! ^= 0xff;
    expect(() => records(bad)).toThrow(/data CRC/);
  });

  it("is read by protobuf's own runtime in Python (Debian's python3-protobuf), CRCs checked", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-sinks-'));
    const { tbPath } = await writeRun(dir);
    const { stdout } = await promisify(execFile)('/usr/bin/python3', [READER, tbPath]);
    const events = stdout
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events[0]).toEqual({ wall_time: T0 / 1000, step: 0, file_version: 'brain.Event:2' });
    expect(events[2]).toMatchObject({ step: 2, scalars: { 'perf/rollout_time': 20, 'rollout/aborted': 0 } });
    const bad = new Uint8Array(readFileSync(tbPath));
    bad[20]! ^= 0xff;
    const badPath = join(dir, 'bad.tfevents');
    writeFileSync(badPath, bad);
    await expect(promisify(execFile)('/usr/bin/python3', [READER, badPath])).rejects.toThrow(
      /bad data CRC at byte 0/,
    );
  });

  it('keeps writing to the other sinks when one fails, then reports the failure', async () => {
    const seen: number[] = [];
    const ok: MetricSink = {
      rollout: async () => {},
      step: async (s) => void seen.push(s.step),
      close: async () => {},
    };
    const broken: MetricSink = {
      rollout: async () => {},
      step: async () => {
        throw new Error('ENOSPC: no space left on device');
      },
      close: async () => {},
    };
    await expect(fanOut([broken, ok]).step({ step: 3, t: 0, scalars: {} })).rejects.toThrow(/ENOSPC/);
    expect(seen).toEqual([3]);
  });
});
