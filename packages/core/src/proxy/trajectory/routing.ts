/**
 * Routing replay (R3) of a packed row, in slime's layout: `rollout_routed_experts` has one row per
 * token of the sample but the last (`len(tokens) − 1`), `layers × topK` expert ids each. A row's
 * positions are stitched like its tokens: the first turn gives its prompt's and output's routing; each
 * turn that extends the row gives the routing from the previous turn's last output token (forwarded in
 * this turn's prefill) through its observations and its own output. Every position comes from the
 * engine: the proxy asks for the whole sequence (prompt start 0), so no span is ever absent.
 */
import type { Turn } from '../../rollout.js';

/** A row's routed experts, or why it has none although some of its turns have them. */
export interface RowRoutes {
  /** `[position][layer][k]`, `len(tokens) − 1` positions. */
  experts: number[][][];
  error?: string | undefined;
}

/**
 * The routing of a row whose turns `rowTurns` contribute their positions from `from[i]` on (0 for the
 * row's first turn). Undefined when none of the turns carries routing.
 */
export function rowRoutes(
  turns: readonly Turn[],
  rowTurns: readonly number[],
  from: readonly number[],
): RowRoutes | undefined {
  const withRoutes = rowTurns.filter((t) => turns[t]!.routes !== undefined);
  if (withRoutes.length === 0) return undefined;
  if (withRoutes.length !== rowTurns.length) {
    const missing = rowTurns.find((t) => turns[t]!.routes === undefined)!;
    return {
      experts: [],
      error: `turn ${missing} has no routed experts while turn ${withRoutes[0]} has: every turn of a routing-replay trajectory must carry them`,
    };
  }
  const experts: number[][][] = [];
  for (const [i, t] of rowTurns.entries()) {
    const { layers, topK, start, experts: flat } = turns[t]!.routes!;
    const width = layers * topK;
    const end = start + flat.length / width;
    if (from[i]! < start || experts.length !== from[i]) {
      return {
        experts: [],
        error: `turn ${t}'s routed experts cover positions [${start}, ${end}); the row needs them from ${from[i]} (it holds ${experts.length})`,
      };
    }
    for (let p = from[i]!; p < end; p++) {
      const row: number[][] = [];
      for (let l = 0; l < layers; l++) {
        const at = (p - start) * width + l * topK;
        row.push(Array.from(flat.subarray(at, at + topK)));
      }
      experts.push(row);
    }
  }
  return { experts };
}

/**
 * The routing a session keeps of a turn: when its prompt extends the previous turn's prompt and
 * output, a row never takes the positions before the previous output's last token from it (they come
 * from earlier turns), so only the rest is kept, copied out of the engine's whole-sequence array.
 */
export function keptRoutes(previous: Turn | undefined, turn: Omit<Turn, 'index'>): Turn['routes'] {
  const routes = turn.routes;
  if (!routes || !previous) return routes;
  const a = previous.promptIds;
  const b = previous.outputIds;
  const p = turn.promptIds;
  const n = a.length + b.length;
  if (p.length < n) return routes;
  for (let k = 0; k < a.length; k++) if (p[k] !== a[k]) return routes;
  for (let k = 0; k < b.length; k++) if (p[a.length + k] !== b[k]) return routes;
  const start = n - 1;
  if (start <= routes.start) return routes;
  const width = routes.layers * routes.topK;
  return { ...routes, start, experts: routes.experts.slice((start - routes.start) * width) };
}
