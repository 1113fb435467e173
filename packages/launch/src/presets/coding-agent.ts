/**
 * The reference coding-agent run (slime on a SkyPilot Job Group): Qwen3-14B, an H100:4 trainer and
 * 1-GPU SGLang engines, scaled out by engine count. These are the configs the 1-, 2- and 3-engine
 * Job Groups of the reference example are reproduced from.
 */
import { type LaunchConfig, type LaunchPlan, resolvePlan } from '../plan.js';

/** The reference engine counts and their configs (every other field is a default). */
export const CODING_AGENT_CONFIGS = {
  1: { engines: { count: 1 } },
  2: { engines: { count: 2 } },
  3: { engines: { count: 3 } },
} as const satisfies Record<number, LaunchConfig>;

/** The coding-agent plan for `engines` engines, with `overrides` applied on top of the reference. */
export function codingAgentPlan(
  engines: number,
  options: {
    overrides?:
      | (Omit<LaunchConfig, 'engines'> & {
          engines?: Omit<NonNullable<LaunchConfig['engines']>, 'count'> | undefined;
        })
      | undefined;
    env?: Record<string, string | undefined> | undefined;
  } = {},
): LaunchPlan {
  const { overrides = {}, env } = options;
  return resolvePlan({ ...overrides, engines: { ...overrides.engines, count: engines } }, env ? { env } : {});
}
