/**
 * The real pinned harnesses, unmodified (Qwen Code, pi and Gemini CLI with their pinned Node), in a
 * docker sandbox that reaches only the capture proxy (the container keeps no network; the forwarder
 * relays 127.0.0.1 to the bound socket): each applies the fix of an offline task, graded in a fresh
 * sandbox; every trained token is what the engine sampled. Runs when a Docker engine answers
 * (scripts/docker-up.sh; CI as root always has one).
 */
import { dockerForTests } from '@vime/sandbox/testing';
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import {
  claudeCodeScript,
  codexScript,
  geminiCliScript,
  opencodeScript,
  piScript,
  qwenCodeScript,
} from './standin.js';

describe.runIf(dockerForTests())('harnesses in a docker sandbox', () => {
  it('codex fixes an offline task (reward 1) through the docker channel', async () => {
    const { run, reward, engineCalls } = await harnessOnOfflineTask('codex', codexScript, 'docker');
    expect(reward).toBe(1);
    expect(run.turns).toHaveLength(2);
    expect(engineCalls).toBe(2);
  }, 300_000);

  it('claude-code fixes an offline task (reward 1) through the docker channel', async () => {
    const { run, reward, engineCalls } = await harnessOnOfflineTask(
      'claude-code',
      claudeCodeScript,
      'docker',
    );
    expect(reward).toBe(1);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', is_error: false, result: 'The bug is fixed.' });
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);

  it('qwen-code fixes an offline task (reward 1) through the docker channel', async () => {
    const { run, reward, engineCalls } = await harnessOnOfflineTask('qwen-code', qwenCodeScript, 'docker');
    expect(reward).toBe(1);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', is_error: false, result: 'The bug is fixed.' });
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);

  it('pi fixes an offline task (reward 1) through the docker channel', async () => {
    const { run, reward, engineCalls } = await harnessOnOfflineTask('pi', piScript, 'docker');
    expect(reward).toBe(1);
    expect(run.events.at(-1)).toMatchObject({ type: 'agent_end' });
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);

  it('opencode fixes an offline task (reward 1) through the docker channel', async () => {
    const { run, reward, engineCalls } = await harnessOnOfflineTask('opencode', opencodeScript, 'docker');
    expect(reward).toBe(1);
    expect(run.events.at(-1)).toMatchObject({ type: 'step_finish', part: { reason: 'stop' } });
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);

  it('gemini-cli fixes an offline task (reward 1) through the docker channel', async () => {
    const { run, reward, engineCalls } = await harnessOnOfflineTask('gemini-cli', geminiCliScript, 'docker');
    expect(reward).toBe(1);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', status: 'success' });
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);
});
