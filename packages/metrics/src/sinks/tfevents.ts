/**
 * TensorBoard event files: TFRecord framing (length, masked CRC-32C of the length, the record, masked
 * CRC-32C of the record) around `tensorflow.Event` protobufs. The first record carries the file version;
 * each later one a step's scalars as `Summary.Value{tag, simple_value}`, which TensorBoard's scalar
 * dashboard reads. Field numbers follow TensorFlow's `event.proto` and `summary.proto`.
 */
import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { maskedCrc32c } from './crc32c.js';
import { ProtoWriter } from './protobuf.js';
import { finiteScalars, type MetricSink, type RunMetadata } from './sink.js';

/** `Event.file_version` of the format this writer produces. */
export const TFEVENTS_FILE_VERSION = 'brain.Event:2';

/** One TFRecord: `u64 length | u32 masked_crc(length) | data | u32 masked_crc(data)`, little-endian. */
export function tfRecord(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(8 + 4 + data.length + 4);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(data.length), true);
  view.setUint32(8, maskedCrc32c(out.subarray(0, 8)), true);
  out.set(data, 12);
  view.setUint32(12 + data.length, maskedCrc32c(data), true);
  return out;
}

/** An `Event` with `wall_time` (seconds), `step` and either the file version or scalar values. */
export function eventProto(
  event: { wallTime: number; step: number } & (
    | { fileVersion: string }
    | { scalars: Array<[string, number]> }
  ),
): Uint8Array {
  const w = new ProtoWriter().double(1, event.wallTime).int(2, event.step);
  if ('fileVersion' in event) w.string(3, event.fileVersion);
  else
    w.message(5, (summary) => {
      for (const [tag, value] of event.scalars)
        summary.message(1, (v) => {
          v.string(1, tag).float(2, value);
        });
    });
  return w.finish();
}

/**
 * A sink writing `events.out.tfevents.<time>.<host>.<pid>.vime` under `dir` (point `tensorboard
 * --logdir` at it): one event per step with that step's scalars. Every record is appended whole, in order.
 */
export async function tensorboardSink(dir: string, run: RunMetadata): Promise<MetricSink & { path: string }> {
  await mkdir(dir, { recursive: true });
  const path = join(
    dir,
    `events.out.tfevents.${Math.floor(run.startedAt / 1000)}.${hostname().replace(/[^\w.-]/g, '_')}.${process.pid}.vime`,
  );
  await writeFile(
    path,
    tfRecord(eventProto({ wallTime: run.startedAt / 1000, step: 0, fileVersion: TFEVENTS_FILE_VERSION })),
  );
  let chain: Promise<void> = Promise.resolve();
  const write = (t: number, step: number, scalars: Array<[string, number]>) => {
    if (scalars.length === 0) return chain;
    const bytes = tfRecord(eventProto({ wallTime: t / 1000, step, scalars }));
    chain = chain.then(() => appendFile(path, bytes));
    return chain;
  };
  return {
    path,
    // Per-rollout records stay in the JSONL: TensorBoard charts one value per tag and step.
    rollout: async () => {},
    step: (s) => write(s.t, s.step, finiteScalars(s.scalars)),
    close: async () => {
      await chain;
    },
  };
}
