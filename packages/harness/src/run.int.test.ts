/**
 * The run's contract: `metadata.agent` is one of three names (anything else, in any spelling, is a
 * ConfigError naming the field); a harness is only started against an open session; and the time budget
 * holds against a harness whose engine stalls (the real Claude Code binary, killed at its deadline, with
 * nothing captured for the unanswered turn).
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { bubblewrapProvider } from '@vime/sandbox';
import { afterAll, describe, expect, it } from 'vitest';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { installHarness } from './install.js';
import { agentOf, harnessSandboxSpec, runHarness } from './run.js';

const work = mkdtempSync(join(tmpdir(), 'vime-harness-run-'));
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('agentOf', () => {
  it('reads metadata.agent, defaulting to mini-swe-agent', () => {
    expect(agentOf(undefined)).toBe('mini-swe-agent');
    expect(agentOf({})).toBe('mini-swe-agent');
    // A missing value in a parquet or JSON row reads as null: unset, not an agent name.
    expect(agentOf({ agent: null })).toBe('mini-swe-agent');
    expect(agentOf({ agent: 'claude-code' })).toBe('claude-code');
    expect(agentOf({ agent: 'codex' })).toBe('codex');
  });

  it('refuses any other value, naming the field and the choices', () => {
    for (const agent of ['Claude-Code', 'claude_code', ' codex', 'codex ', 'aider', '', 1, ['codex']]) {
      const error = (() => {
        try {
          agentOf({ agent });
        } catch (e) {
          return e;
        }
      })();
      expect(ConfigError.isInstance(error), JSON.stringify(agent)).toBe(true);
      expect(String(error)).toMatch(/metadata\.agent: expected one of mini-swe-agent, claude-code, codex/);
    }
  });
});

describe('runHarness', () => {
  it('holds its time budget when the engine stalls, and records no unanswered turn', async () => {
    const installed = await installHarness('claude-code');
    const tokenizer = await loadTokenizer(qwen3Dir());
    const standIn = await startStandInEngine({
      tokenizer,
      policy: () => 'never sent',
      fault: () => ({ kind: 'stall', ms: 120_000 }),
    });
    const engine = sglangEngine(standIn.url);
    const socketPath = join(work, 'proxy.sock');
    const proxy = await startCaptureProxy({ engine, tokenizer, socketPath });
    const sandbox = await bubblewrapProvider({ rootDir: join(work, 'sbx') }).create({
      workdir: '/work',
      ...harnessSandboxSpec(installed, socketPath),
    });
    try {
      await expect(
        runHarness({
          installed,
          sandbox,
          proxy,
          sessionId: 'not-open',
          prompt: 'hi',
          model: 'm',
          timeoutMs: 1000,
        }),
      ).rejects.toThrow(/session "not-open" is not open/);
      proxy.openSession('s1');
      const base = { installed, sandbox, proxy, sessionId: 's1', prompt: 'hi', model: 'm', timeoutMs: 1000 };
      // More environment may not replace what the launch sets (the proxy's URL and key, traffic off).
      await expect(runHarness({ ...base, env: { ANTHROPIC_BASE_URL: 'http://elsewhere' } })).rejects.toThrow(
        /env\.ANTHROPIC_BASE_URL is set by the claude-code launch/,
      );
      // codexConfig is Codex's.
      await expect(runHarness({ ...base, codexConfig: { model_context_window: 1 } })).rejects.toThrow(
        /codexConfig is for Codex only, not claude-code/,
      );
      expect(proxy.trajectories.trajectory('s1').turns).toHaveLength(0);
      const started = performance.now();
      const run = await runHarness({
        installed,
        sandbox,
        proxy,
        sessionId: 's1',
        prompt: 'say hi',
        model: 'vime-policy',
        timeoutMs: 8000,
      });
      expect(run.timedOut).toBe(true);
      expect(run.exitCode).toBeNull();
      expect(performance.now() - started).toBeLessThan(30_000);
      expect(run.turns).toHaveLength(0);
      // The harness had started: its init event is in the log.
      expect(run.events[0]).toMatchObject({ type: 'system', subtype: 'init' });
      expect(proxy.finishSession('s1', { status: 'aborted' })).toEqual([]);
    } finally {
      await sandbox.terminate();
      await proxy.close();
      await engine.close();
      await standIn.close();
    }
  }, 120_000);
});
