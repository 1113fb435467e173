/**
 * MoE routing replay (R3): the experts the router picked for every forwarded token at every MoE layer,
 * as the engine reports them, so the trainer's forward pass can replay the rollout's routing.
 *
 * The layout is the engines' and slime's: one row per forwarded position, `layers × topK` expert ids
 * each, row-major. A generation over `P` prompt and `O` output tokens forwards `P + O − 1` positions
 * (the last sampled token never goes through the model), so it reports rows `[start, P + O − 1)`.
 *
 * - SGLang (`python/sglang/srt/managers/io_struct.py`, `GenerateReqInput`, sgl-project/sglang@001067f):
 *   the request sets `return_routed_experts: true` and `routed_experts_start_len` (absolute start, 0 =
 *   the whole sequence); the finished answer's `meta_info.routed_experts` is base64 of little-endian
 *   int32, flat (no shape: the reader knows layers and top-k). slime reads it so
 *   (`slime/utils/types.py` `_apply_meta_info`, `slime/utils/misc.py` `decode_int32_meta_array`,
 *   THUDM/slime@624b824).
 * - vLLM (`vllm/entrypoints/openai/completion/protocol.py` and `serving.py`, vllm-project/vllm@002032e /
 *   @030ea52): the server runs with `--enable-return-routed-experts`, the request may set
 *   `routed_experts_prompt_start` (prompt tokens to skip); the non-streamed answer's
 *   `choices[i].routed_experts` is base64 of a `.npy` file of shape `(rows, layers, topK)`, dtype uint8,
 *   uint16 or int32. Streamed chunks carry none.
 * - slime's `Sample.rollout_routed_experts` (`slime/ray/rollout.py`, `slime/backends/megatron_utils/
 *   cp_utils.py` `prepare_routed_experts_for_routing_replay`): shape `(len(tokens) − 1, num_layers,
 *   moe_router_topk)`, one row per token but the last.
 */
import { ConfigError, EngineError } from '../errors.js';

/** The routing a run replays: the model's MoE layer count and experts per token (slime's `num_layers`, `moe_router_topk`). */
export interface RoutingShape {
  layers: number;
  topK: number;
}

/** Routing of consecutive forwarded positions `[start, start + rows)`: `rows × layers × topK` expert ids. */
export interface RoutedExperts extends RoutingShape {
  /** Absolute position of the first row in the generation's sequence (prompt then output). */
  start: number;
  /** Expert ids, row-major over (position, layer, k). */
  experts: Int32Array;
}

/** Rows held by `routes`. */
export function routeRows(routes: RoutedExperts): number {
  return routes.experts.length / (routes.layers * routes.topK);
}

/** Check a routing shape a user gave (positive integers), naming the field. */
export function checkRoutingShape(shape: RoutingShape, field: string): RoutingShape {
  for (const key of ['layers', 'topK'] as const) {
    const v = shape[key];
    if (!Number.isInteger(v) || v <= 0) {
      throw new ConfigError(
        `${field}.${key}: expected a positive integer (the model's ${key === 'layers' ? 'num_layers' : 'moe_router_topk'}), found ${JSON.stringify(v)}`,
      );
    }
  }
  return shape;
}

function fail(url: string, where: string, message: string): EngineError {
  return new EngineError(`${url}${where}: ${message}`, { url, isRetryable: false });
}

/** Rows a generation of `promptTokens` + `outputTokens` reports from `start`: `[start, P + O − 1)`. */
export function expectedRows(promptTokens: number, outputTokens: number, start: number): number {
  return Math.max(0, promptTokens + outputTokens - 1 - start);
}

/**
 * SGLang's `meta_info.routed_experts` (base64 int32, flat), checked against the generation: its length
 * must be `(P + O − 1 − start) × layers × topK`. Missing or wrong: an `EngineError` (fail closed).
 */
export function readSglangRoutes(
  meta: Record<string, unknown>,
  g: { promptTokens: number; outputTokens: number; start: number },
  shape: RoutingShape,
  url: string,
): RoutedExperts {
  const where = '/generate: meta_info.routed_experts';
  const value = meta.routed_experts;
  if (typeof value !== 'string') {
    throw fail(
      url,
      where,
      `routing replay needs the routed experts of every token, found ${value === undefined ? 'none' : JSON.stringify(value).slice(0, 60)}; serve with --enable-return-routed-experts`,
    );
  }
  const bytes = Buffer.from(value, 'base64');
  if (bytes.length % 4 !== 0)
    throw fail(url, where, `expected base64 of int32 values, found ${bytes.length} bytes`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const experts = Int32Array.from({ length: bytes.length / 4 }, (_, i) => view.getInt32(i * 4, true));
  const rows = expectedRows(g.promptTokens, g.outputTokens, g.start);
  const want = rows * shape.layers * shape.topK;
  if (experts.length !== want) {
    throw fail(
      url,
      where,
      `expected ${want} expert ids (${rows} positions × ${shape.layers} layers × top-${shape.topK}: prompt ${g.promptTokens} + output ${g.outputTokens} − 1 − start ${g.start}), found ${experts.length}`,
    );
  }
  return { ...shape, start: g.start, experts };
}

const NPY_MAGIC = '\x93NUMPY';
const NPY_DTYPES: Record<string, { size: number; read: (v: DataView, at: number) => number }> = {
  '|u1': { size: 1, read: (v, at) => v.getUint8(at) },
  '<u1': { size: 1, read: (v, at) => v.getUint8(at) },
  '|i1': { size: 1, read: (v, at) => v.getInt8(at) },
  '<u2': { size: 2, read: (v, at) => v.getUint16(at, true) },
  '<i2': { size: 2, read: (v, at) => v.getInt16(at, true) },
  '<i4': { size: 4, read: (v, at) => v.getInt32(at, true) },
  '<u4': { size: 4, read: (v, at) => v.getUint32(at, true) },
};

/** A `.npy` file's integer array and shape (format 1.0–3.0, little-endian, C order). */
export function parseNpy(bytes: Uint8Array): { shape: number[]; values: Int32Array } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 10 || Buffer.from(bytes.subarray(0, 6)).toString('latin1') !== NPY_MAGIC) {
    throw new Error('not a .npy file (no \\x93NUMPY magic)');
  }
  const major = bytes[6]!;
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const headerStart = major === 1 ? 10 : 12;
  const header = Buffer.from(bytes.subarray(headerStart, headerStart + headerLength)).toString('latin1');
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const fortran = /'fortran_order':\s*(True|False)/.exec(header)?.[1];
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)?.[1];
  const dtype = descr === undefined ? undefined : NPY_DTYPES[descr];
  if (!dtype) throw new Error(`unsupported .npy dtype ${JSON.stringify(descr)} (expected an integer type)`);
  if (fortran !== 'False') throw new Error('a Fortran-order .npy array is not supported');
  if (shapeText === undefined) throw new Error('.npy header has no shape');
  const shape = shapeText
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const dataStart = headerStart + headerLength;
  if (bytes.length - dataStart !== count * dtype.size) {
    throw new Error(
      `.npy shape (${shape.join(', ')}) needs ${count * dtype.size} data bytes, found ${bytes.length - dataStart}`,
    );
  }
  const values = Int32Array.from({ length: count }, (_, i) => dtype.read(view, dataStart + i * dtype.size));
  return { shape, values };
}

/** `values` of `shape` as a `.npy` file (format 1.0, `<i4`, C order), as numpy's `np.save` writes it. */
export function encodeNpy(values: Int32Array, shape: readonly number[]): Uint8Array {
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(', ');
  let header = `{'descr': '<i4', 'fortran_order': False, 'shape': (${dims}), }`;
  const unpadded = 10 + header.length + 1;
  header += ' '.repeat((64 - (unpadded % 64)) % 64) + '\n';
  const out = new Uint8Array(10 + header.length + values.length * 4);
  const view = new DataView(out.buffer);
  out.set(Buffer.from(NPY_MAGIC, 'latin1'), 0);
  out[6] = 1;
  out[7] = 0;
  view.setUint16(8, header.length, true);
  out.set(Buffer.from(header, 'latin1'), 10);
  for (let i = 0; i < values.length; i++) view.setInt32(10 + header.length + i * 4, values[i]!, true);
  return out;
}

/**
 * vLLM's `choices[0].routed_experts` (base64 `.npy`, shape `(rows, layers, topK)`), checked against the
 * generation. Missing or wrong: an `EngineError` (fail closed).
 */
export function readVllmRoutes(
  value: unknown,
  g: { promptTokens: number; outputTokens: number; start: number },
  shape: RoutingShape,
  url: string,
): RoutedExperts {
  const where = '/v1/completions: choices[0].routed_experts';
  if (typeof value !== 'string') {
    throw fail(
      url,
      where,
      `routing replay needs the routed experts of every token, found ${value == null ? 'none' : JSON.stringify(value).slice(0, 60)}; serve with --enable-return-routed-experts`,
    );
  }
  let npy: { shape: number[]; values: Int32Array };
  try {
    npy = parseNpy(Buffer.from(value, 'base64'));
  } catch (error) {
    throw fail(url, where, (error as Error).message);
  }
  const rows = expectedRows(g.promptTokens, g.outputTokens, g.start);
  const [r, l, k] = npy.shape;
  if (npy.shape.length !== 3 || r !== rows || l !== shape.layers || k !== shape.topK) {
    throw fail(
      url,
      where,
      `expected shape (${rows}, ${shape.layers}, ${shape.topK}) (prompt ${g.promptTokens} + output ${g.outputTokens} − 1 − start ${g.start} positions × layers × top-k), found (${npy.shape.join(', ')})`,
    );
  }
  return { ...shape, start: g.start, experts: npy.values };
}

/**
 * The checked routing of a turn asked for it: present, the asked shape, and exactly one row per
 * forwarded position of the turn (`prompt + output − 1`). An `EngineError` otherwise (fail closed).
 */
export function turnRoutes(
  shape: RoutingShape | undefined,
  result: { outputIds: Int32Array; routes?: RoutedExperts | undefined; engines: readonly string[] },
  promptTokens: number,
): RoutedExperts | undefined {
  if (!shape) return undefined;
  const url = result.engines[result.engines.length - 1] ?? 'engine';
  const routes = result.routes;
  if (!routes) {
    throw new EngineError(
      `${url}: routing replay is on, but the engine returned no routed experts for the turn; serve with --enable-return-routed-experts, or turn routing replay off`,
      { url, isRetryable: false },
    );
  }
  const rows = expectedRows(promptTokens, result.outputIds.length, 0);
  if (
    routes.start !== 0 ||
    routes.layers !== shape.layers ||
    routes.topK !== shape.topK ||
    routes.experts.length !== rows * shape.layers * shape.topK
  ) {
    throw new EngineError(
      `${url}: routed experts: expected ${rows} positions (prompt ${promptTokens} + output ${result.outputIds.length} − 1) × ${shape.layers} layers × top-${shape.topK} from position 0, found ${routeRows(routes)} positions × ${routes.layers} × ${routes.topK} from ${routes.start}`,
      { url, isRetryable: false },
    );
  }
  for (let i = 0; i < routes.experts.length; i++) {
    if (routes.experts[i]! < 0) {
      throw new EngineError(`${url}: routed experts[${i}]: ${routes.experts[i]} is not an expert id`, {
        url,
        isRetryable: false,
      });
    }
  }
  return routes;
}

/**
 * The routing of consecutive generations of one turn (a continuation after an engine-side abort sends
 * the prompt and the output so far): each part's rows from where the previous one ended. Undefined
 * when a part has none.
 */
export function concatRoutes(parts: ReadonlyArray<RoutedExperts | undefined>): RoutedExperts | undefined {
  if (parts.length === 0 || parts.some((p) => p === undefined)) return undefined;
  const first = parts[0]!;
  const width = first.layers * first.topK;
  const chunks: Int32Array[] = [];
  let end = first.start;
  for (const p of parts as RoutedExperts[]) {
    if (p.layers !== first.layers || p.topK !== first.topK) return undefined;
    const pEnd = p.start + routeRows(p);
    if (p.start > end) return undefined;
    if (pEnd > end) chunks.push(p.experts.subarray((end - p.start) * width));
    end = Math.max(end, pEnd);
  }
  const experts = new Int32Array((end - first.start) * width);
  let at = 0;
  for (const c of chunks) {
    experts.set(c, at);
    at += c.length;
  }
  return { layers: first.layers, topK: first.topK, start: first.start, experts };
}

/**
 * The request fields that ask an engine for the routing of the whole sequence: SGLang's
 * `return_routed_experts` + `routed_experts_start_len`, vLLM's `routed_experts_prompt_start` (vLLM
 * returns routing whenever the server runs with `--enable-return-routed-experts`). Empty when not asked.
 */
export function routingRequest(
  kind: 'sglang' | 'vllm',
  request: { routedExperts?: RoutingShape | undefined },
): Record<string, unknown> {
  if (!request.routedExperts) return {};
  return kind === 'sglang'
    ? { return_routed_experts: true, routed_experts_start_len: 0 }
    : { routed_experts_prompt_start: 0 };
}
