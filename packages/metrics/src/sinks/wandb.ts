/**
 * A Weights & Biases offline run directory, written without the `wandb` package: what `wandb sync DIR`
 * uploads later. The run file `run-<id>.wandb` is W&B's record log (LevelDB's log format: 32 KiB blocks
 * of `u32 crc | u16 length | u8 type | data` chunks after a 7-byte `:W&B` header; the CRC is zlib's
 * CRC-32 of the type byte and the data) holding `wandb_internal.Record` protobufs: a header, the run
 * (id, project, config, start time), one history row per step, then the summary, the exit and a final
 * record. Field numbers follow W&B's `wandb_internal.proto`.
 */
import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { ProtoWriter } from './protobuf.js';
import { finiteScalars, type MetricSink, type RunMetadata } from './sink.js';

const BLOCK = 32 * 1024;
const CHUNK_HEADER = 7;
const CHUNK = { full: 1, first: 2, middle: 3, last: 4 } as const;
/** `:W&B`, magic 0xBEE1, version 0. */
const FILE_HEADER = Uint8Array.from([0x3a, 0x57, 0x26, 0x42, 0xe1, 0xbe, 0x00]);

/** `Record` fields (wandb_internal.proto). */
const RECORD = { num: 1, history: 2, summary: 3, run: 17, exit: 18, final: 20, header: 21 } as const;

/** Options of `wandbOfflineSink`. */
export interface WandbOfflineOptions {
  project?: string | undefined;
  entity?: string | undefined;
}

/**
 * Frames `records` in W&B's log format, continuing a file whose length is `offset`: a chunk never starts
 * in a block's last 6 bytes (they are zero-padded), and a record that does not fit is split FIRST /
 * MIDDLE… / LAST across blocks.
 */
export function wandbLogChunks(records: ReadonlyArray<Uint8Array>, offset: number): Uint8Array {
  const parts: Uint8Array[] = [];
  let at = offset;
  const chunk = (type: number, data: Uint8Array) => {
    const head = new Uint8Array(CHUNK_HEADER);
    const view = new DataView(head.buffer);
    view.setUint32(0, crc32(data, crc32(Uint8Array.of(type))), true);
    view.setUint16(4, data.length, true);
    head[6] = type;
    parts.push(head, data);
    at += CHUNK_HEADER + data.length;
  };
  for (const record of records) {
    let left = BLOCK - (at % BLOCK);
    if (left < CHUNK_HEADER) {
      parts.push(new Uint8Array(left));
      at += left;
      left = BLOCK;
    }
    if (record.length + CHUNK_HEADER <= left) {
      chunk(CHUNK.full, record);
      continue;
    }
    let used = left - CHUNK_HEADER;
    chunk(CHUNK.first, record.subarray(0, used));
    while (record.length - used > BLOCK - CHUNK_HEADER) {
      chunk(CHUNK.middle, record.subarray(used, used + BLOCK - CHUNK_HEADER));
      used += BLOCK - CHUNK_HEADER;
    }
    chunk(CHUNK.last, record.subarray(used));
  }
  const out = new Uint8Array(at - offset);
  let k = 0;
  for (const p of parts) {
    out.set(p, k);
    k += p.length;
  }
  return out;
}

/** `key` + `value_json` items (HistoryItem, SummaryItem and ConfigItem share field numbers 1 and 16). */
function items(w: ProtoWriter, field: number, entries: Iterable<[string, unknown]>): void {
  for (const [key, value] of entries)
    w.message(field, (item) => {
      item.string(1, key).string(16, JSON.stringify(value));
    });
}

/** A W&B run id: letters, digits, `_` and `-` (the run's own id, made to fit). */
export function wandbRunId(runId: string): string {
  const id = runId.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 64);
  return id.length > 0 ? id : 'run';
}

/** `YYYYMMDD_HHMMSS` in UTC, as W&B names run directories. */
function stamp(ms: number): string {
  const d = new Date(ms).toISOString();
  return `${d.slice(0, 10).replaceAll('-', '')}_${d.slice(11, 19).replaceAll(':', '')}`;
}

/**
 * A sink writing `<dir>/offline-run-<time>-<id>/run-<id>.wandb` (upload it with `wandb sync` on that
 * folder; W&B itself is never needed to run): the run's config at open, one history row per step
 * (`_step`, `_runtime`, `_timestamp` and the step's scalars), the final scalars as the summary at close.
 */
export async function wandbOfflineSink(
  dir: string,
  run: RunMetadata,
  options: WandbOfflineOptions = {},
): Promise<MetricSink & { path: string; runDir: string }> {
  const id = wandbRunId(run.runId);
  const runDir = join(dir, `offline-run-${stamp(run.startedAt)}-${id}`);
  await mkdir(join(runDir, 'files'), { recursive: true });
  const path = join(runDir, `run-${id}.wandb`);
  let num = 0;
  let size = FILE_HEADER.length;
  const record = (field: number, build: (w: ProtoWriter) => void) =>
    new ProtoWriter().int(RECORD.num, ++num).message(field, build).finish();
  const config =
    run.config && typeof run.config === 'object' && !Array.isArray(run.config)
      ? Object.entries(run.config as Record<string, unknown>)
      : [];
  const seconds = Math.floor(run.startedAt / 1000);
  const opening = [
    record(RECORD.header, () => {}),
    record(RECORD.run, (r) => {
      r.string(1, id);
      if (options.entity) r.string(2, options.entity);
      r.string(3, options.project ?? 'vime');
      r.message(4, (c) =>
        items(c, 1, [...config, ...(run.engine ? [['engine', run.engine] as [string, unknown]] : [])]),
      );
      r.string(8, run.runId);
      r.string(13, hostname());
      r.message(17, (t) => {
        t.int(1, seconds).int(2, (run.startedAt - seconds * 1000) * 1e6);
      });
    }),
  ];
  const framed = wandbLogChunks(opening, size);
  await writeFile(path, Buffer.concat([FILE_HEADER, framed]));
  size += framed.length;
  let chain: Promise<void> = Promise.resolve();
  const append = (records: Uint8Array[]) => {
    const bytes = wandbLogChunks(records, size);
    size += bytes.length;
    chain = chain.then(() => appendFile(path, bytes));
    return chain;
  };
  let last = run.startedAt;
  return {
    path,
    runDir,
    // Per-rollout records stay in the JSONL, as for TensorBoard.
    rollout: async () => {},
    step: (s) => {
      last = Math.max(last, s.t);
      const row: Array<[string, unknown]> = [
        ['_step', s.step],
        ['_runtime', (s.t - run.startedAt) / 1000],
        ['_timestamp', s.t / 1000],
        ...finiteScalars(s.scalars),
      ];
      return append([
        record(RECORD.history, (h) => {
          items(h, 1, row);
          h.message(2, (step) => {
            step.int(1, s.step);
          });
        }),
      ]);
    },
    close: async (summary) => {
      const final = finiteScalars(summary ?? {});
      const runtime = Math.max(0, Math.round((Math.max(last, Date.now()) - run.startedAt) / 1000));
      await append([
        record(RECORD.summary, (w) => items(w, 1, final)),
        record(RECORD.exit, (e) => {
          e.int(1, 0).int(2, runtime);
        }),
        record(RECORD.final, () => {}),
      ]);
      await writeFile(
        join(runDir, 'files', 'wandb-summary.json'),
        `${JSON.stringify(Object.fromEntries([...final, ['_runtime', runtime]]))}\n`,
      );
    },
  };
}
