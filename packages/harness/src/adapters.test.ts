/** The launch of each harness as written (argv, environment, files): pure, no process. */
import { ConfigError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { codexLaunch, type HarnessLaunchInput } from './adapters.js';
import { HARNESS_PACKAGES } from './install.js';

const input: HarnessLaunchInput = {
  installed: { kind: 'codex', package: HARNESS_PACKAGES.codex, dir: '/opt/codex' },
  baseUrl: 'http://127.0.0.1:8765',
  sessionKey: 'k',
  model: 'vime-policy',
  prompt: 'fix it',
  tools: [],
};

describe('codexLaunch', () => {
  it('adds codexConfig keys to config.toml (a compaction limit), after the ones the launch writes', () => {
    const launch = codexLaunch({
      ...input,
      codexConfig: {
        model_context_window: 100_000,
        model_auto_compact_token_limit: 12_000,
        hide_agent_reasoning: true,
      },
    });
    const config = Object.values(launch.files)[0]!;
    const head = config.slice(0, config.indexOf('[model_providers.vime]'));
    expect(head).toContain('model_provider = "vime"\n');
    expect(head).toContain(
      'model_context_window = 100000\nmodel_auto_compact_token_limit = 12000\nhide_agent_reasoning = true\n',
    );
  });

  it('refuses a key the launch writes, a key that is not a bare TOML key, and a non-finite number', () => {
    for (const [codexConfig, message] of [
      [{ model_provider: 'openai' }, /codexConfig\.model_provider: the launch sets this key/],
      [{ 'a.b': 1 }, /codexConfig\.a\.b: not a bare TOML key/],
      [{ 'x = 1\n[y]': 1 }, /not a bare TOML key/],
      [
        { model_context_window: Number.NaN },
        /codexConfig\.model_context_window: expected a finite number, found NaN/,
      ],
    ] as const) {
      const error = (() => {
        try {
          codexLaunch({ ...input, codexConfig });
        } catch (e) {
          return e;
        }
      })();
      expect(ConfigError.isInstance(error), JSON.stringify(codexConfig)).toBe(true);
      expect(String(error)).toMatch(message);
    }
  });
});
