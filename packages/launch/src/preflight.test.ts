import { describe, expect, it } from 'vitest';
import { resolvePlan } from './plan.js';
import { preflight } from './preflight.js';

describe('preflight', () => {
  it('passes the reference plans, warning only that wandb is off', () => {
    for (const count of [1, 2, 3]) {
      const report = preflight(resolvePlan({ engines: { count } }));
      expect(report.ok).toBe(true);
      expect(report.problems.map((p) => `${p.severity}:${p.code}`)).toEqual(['warning:env.optional']);
    }
    const withKey = preflight(resolvePlan({}, { env: { WANDB_API_KEY: 'k' } }));
    expect(withKey.problems).toEqual([]);
  });

  it('returns every problem at once', () => {
    const plan = resolvePlan(
      {
        sandbox: { poolReplicas: 100 },
        model: { tensorParallel: 3 },
        requiredEnv: ['HF_TOKEN'],
        ray: { auth: 'token' },
        volume: { accessMode: 'ReadWriteOnce' },
      },
      { env: { WANDB_API_KEY: 'k' } },
    );
    const report = preflight(plan);
    expect(report.ok).toBe(false);
    expect(report.problems.map((p) => `${p.code} ${p.path}`)).toEqual([
      'slime.config slime.parallelism',
      'sandbox.pool sandbox.poolReplicas',
      'volume.access volume.accessMode',
      'env.missing env.HF_TOKEN',
      'env.missing env.RAY_AUTH_TOKEN',
    ]);
    const byCode = Object.fromEntries(report.problems.map((p) => [p.code, p.message]));
    expect(byCode['sandbox.pool']).toBe(
      '184 concurrent rollouts (rollout batch 23 × 8 samples) need at least 184 warm sandboxes; the pool has 100, so 84 claims would wait or fall back to cold starts',
    );
    // No pool: on-demand sandboxes, nothing to size.
    const vllm = preflight(resolvePlan({ engines: { kind: 'vllm' } }, { env: { WANDB_API_KEY: 'k' } }));
    expect(vllm.ok).toBe(true);
    expect(vllm.problems.map((p) => `${p.severity}:${p.code}`)).toEqual(['warning:engines.kind']);
    const local = preflight(
      resolvePlan({
        sandbox: { noPool: true, poolReplicas: 1 },
      }),
    );
    expect(local.problems.filter((p) => p.severity === 'error')).toEqual([]);
  });

  it('catches a trainer or engine that disagrees with the slime config', () => {
    const plan = resolvePlan({ engines: { count: 2 } }, { env: { WANDB_API_KEY: 'k' } });
    const broken = {
      ...plan,
      jobGroup: {
        ...plan.jobGroup,
        engines: { ...plan.jobGroup.engines, count: 3, accelerators: 'L40S:2' },
      },
      slime: {
        ...plan.slime,
        cluster: { ...plan.slime.cluster, actorGpusPerNode: 8 },
        weights: { ...plan.slime.weights, diskDir: '/tmp/weights' },
      },
    };
    expect(preflight(broken).problems.map((p) => p.message)).toEqual([
      'slime asks for 8 trainer GPUs (actorNumNodes × actorGpusPerNode) but the trainer job holds 4 (H100:4 × 1 node(s))',
      'slime is given 2 engine address(es) but the Job Group runs 3 engine job(s)',
      'each engine job holds 2 GPU(s) (L40S:2) but slime expects 1 per engine (rolloutGpusPerEngine)',
      'weights are written to /tmp/weights, outside the shared volume at /shared/policy',
    ]);
  });
});
