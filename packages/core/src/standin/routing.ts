/**
 * The stand-in's MoE routing (R3), on the engines' wires (see `engine/routing.ts`): every forwarded
 * position's `layers × topK` expert ids, a deterministic function of the token there, its position,
 * the layer, the slot and the weight version that forwarded it (new weights route differently) — a
 * stand-in's made-up routing, never a model's. SGLang's `/generate` answers
 * `meta_info.routed_experts` (base64 little-endian int32, flat) when the request sets
 * `return_routed_experts`, from `routed_experts_start_len`; vLLM's `/v1/completions` answers
 * `choices[0].routed_experts` (base64 `.npy`, `(rows, layers, topK)`) on every non-streamed request,
 * from `routed_experts_prompt_start`, as a server started with `--enable-return-routed-experts` does.
 */
import { encodeBase64Array } from '../engine/nucleus.js';
import { encodeNpy } from '../engine/routing.js';

/** The stand-in's routing: a MoE of `experts` experts over `layers` layers, `topK` per token. */
export interface StandInRouting {
  layers: number;
  topK: number;
  experts: number;
  /**
   * Fault injection per request: `missing` answers no routing, `short` one position too few, as an
   * engine that lost them would.
   */
  fault?: ((request: { rid: string; path: string }) => 'missing' | 'short' | undefined) | undefined;
}

function versionSalt(version: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < version.length; i++) h = Math.imul(h ^ version.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The stand-in's expert at (`position`, `layer`, slot `k`) for `tokenId` under weight `version`: deterministic. */
export function standInExpert(
  tokenId: number,
  position: number,
  layer: number,
  k: number,
  routing: Pick<StandInRouting, 'experts' | 'topK'>,
  version: string,
): number {
  let h = Math.imul(tokenId ^ 0x5bd1e995, 0x9e3779b1) ^ Math.imul(position + 0x27d4eb2f, 0x85ebca77);
  h ^= versionSalt(version);
  h ^= Math.imul(layer + 1, 0xc2b2ae35);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d) >>> 0;
  // topK distinct experts per (position, layer): consecutive slots from a hashed first one
  const stride = Math.max(1, Math.floor(routing.experts / routing.topK));
  return (h + k * stride) % routing.experts;
}

/** Rows `[start, ids.length − 1)` of the sequence `ids` (prompt then output) under `version`, flat. */
export function standInRoutes(
  ids: Int32Array,
  start: number,
  routing: Pick<StandInRouting, 'experts' | 'topK' | 'layers'>,
  version: string,
): Int32Array {
  const rows = Math.max(0, ids.length - 1 - start);
  const out = new Int32Array(rows * routing.layers * routing.topK);
  let at = 0;
  for (let p = start; p < start + rows; p++) {
    for (let l = 0; l < routing.layers; l++) {
      for (let k = 0; k < routing.topK; k++) out[at++] = standInExpert(ids[p]!, p, l, k, routing, version);
    }
  }
  return out;
}

function sequence(prompt: Int32Array, output: Int32Array): Int32Array {
  const ids = new Int32Array(prompt.length + output.length);
  ids.set(prompt);
  ids.set(output, prompt.length);
  return ids;
}

function faulted(
  routing: StandInRouting,
  request: { rid: string; path: string },
  experts: Int32Array,
): Int32Array | undefined {
  const fault = routing.fault?.(request);
  if (fault === 'missing') return undefined;
  if (fault === 'short')
    return experts.subarray(0, Math.max(0, experts.length - routing.layers * routing.topK));
  return experts;
}

/** SGLang's `meta_info.routed_experts` for a finished request, or nothing when not asked or faulted. */
export function sglangRoutesMeta(
  routing: StandInRouting | undefined,
  body: { return_routed_experts?: boolean | undefined; routed_experts_start_len?: number | undefined },
  g: { rid: string; outputIds: Int32Array; weightVersion: string },
  prompt: Int32Array,
): { routed_experts?: string } {
  if (!routing || body.return_routed_experts !== true) return {};
  const start = body.routed_experts_start_len ?? 0;
  const experts = faulted(
    routing,
    { rid: g.rid, path: '/generate' },
    standInRoutes(sequence(prompt, g.outputIds), start, routing, g.weightVersion),
  );
  return experts ? { routed_experts: encodeBase64Array(experts) } : {};
}

/** vLLM's `choices[0].routed_experts` for a finished non-streamed request (null when faulted). */
export function vllmRoutesField(
  routing: StandInRouting | undefined,
  body: { routed_experts_prompt_start?: number | null | undefined },
  g: { rid: string; outputIds: Int32Array; weightVersion: string },
  prompt: Int32Array,
): { routed_experts?: string | null } {
  if (!routing) return {};
  const start = body.routed_experts_prompt_start ?? 0;
  const experts = faulted(
    routing,
    { rid: g.rid, path: '/v1/completions' },
    standInRoutes(sequence(prompt, g.outputIds), start, routing, g.weightVersion),
  );
  if (!experts) return { routed_experts: null };
  const rows = experts.length / (routing.layers * routing.topK);
  const npy = encodeNpy(experts, [rows, routing.layers, routing.topK]);
  return { routed_experts: Buffer.from(npy).toString('base64') };
}
