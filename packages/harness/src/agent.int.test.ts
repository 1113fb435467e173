/**
 * A harness agent's failure taxonomy against a stalled engine: Claude Code (the real pinned binary,
 * in a bubblewrap sandbox through the proxy's unix socket) gets its first turn answered, then the engine
 * stalls on the second; the harness is killed at its time budget while its request waits, and the rollout
 * fails as an infrastructure failure (thrown, no reward, no rows), not as a graded 0.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import type { RolloutContext } from '@vime/core/runner';
import { startStandInEngine } from '@vime/core/standin';
import { bubblewrapProvider } from '@vime/sandbox';
import { buildOfflineTaskSet, SweEnvironments, SwePools, sweRollout } from '@vime/swe';
import { expect, inject, it } from 'vitest';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { harnessAgent } from './agent.js';
import { claudeCodeScript, fixOf, oneLineFix, toolResultsIn } from './standin.js';

it('a harness killed at its budget while the engine stalls is an infrastructure failure, never reward 0', async () => {
  const work = await mkdtemp(join(tmpdir(), 'vime-harness-stall-'));
  await chmod(work, 0o755);
  const set = await buildOfflineTaskSet({ dir: inject('offlineTasksDir') });
  const task = { ...set.tasks.find((t) => oneLineFix(t) !== undefined)!, metadata: {} };
  const fix = fixOf(task)!;
  const tokenizer = await loadTokenizer(qwen3Dir());
  const standIn = await startStandInEngine({
    tokenizer,
    policy: ({ prompt }) => claudeCodeScript(toolResultsIn(prompt), fix),
    // The first turn is answered; the second never is.
    fault: ({ requestIndex }) => (requestIndex >= 1 ? { kind: 'stall', ms: 600_000 } : undefined),
  });
  const engine = sglangEngine(standIn.url);
  const socketPath = join(work, 'proxy.sock');
  const proxy = await startCaptureProxy({ engine, tokenizer, socketPath });
  const environments = await SweEnvironments.forDataset(set.jsonlPath);
  const pools = new SwePools(bubblewrapProvider({ rootDir: join(work, 'sbx') }), [task], {
    kind: 'bubblewrap',
    environments,
  });
  const controller = new AbortController();
  const ctx = {
    rolloutId: 1,
    groupIndex: 0,
    index: 0,
    signal: controller.signal,
    emit: () => {},
    phase: (_phase: string, fn: () => unknown) => Promise.resolve(fn()),
  } as unknown as RolloutContext;
  let turns = 0;
  proxy.events.on('turn', () => turns++);
  try {
    const rollout = sweRollout({
      proxy,
      pools,
      // a budget within which a heavily loaded 2-core machine still starts the harness, answers its first
      // turn and sends the second (at 8 s, and at 15 s under load 20, the harness was still starting or
      // busy with its tool call when it was killed: the agent's own budget, rightly reward 0)
      agent: harnessAgent('claude-code', { timeoutMs: 45_000 }),
    });
    const started = performance.now();
    await expect(Promise.resolve(rollout(task, ctx))).rejects.toThrow(
      /killed at its time budget \(45000 ms\) while its request waited on the engine/,
    );
    // Killed at its budget, not held until the engine's 10-minute stall ends.
    expect(performance.now() - started).toBeLessThan(300_000);
    expect(turns).toBe(1);
  } finally {
    controller.abort();
    await proxy.close();
    await engine.close();
    await standIn.close();
    await pools.close();
    await rm(work, { recursive: true, force: true });
  }
}, 360_000);
