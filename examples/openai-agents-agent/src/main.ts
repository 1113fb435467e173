#!/usr/bin/env node
/**
 * `openai-agents-agent [--api chat-completions|responses] [flags of vime-loop]`: the coding-agent RL loop
 * of `@vime/loop` with the Agents SDK agent of `agent.ts` for every sample, speaking the wire `--api`
 * names. Without `--engine-url` a stand-in engine answers: a scripted fix in the SDK shell's
 * `exec_command` calls, not a model.
 */
import { setTracingDisabled } from '@openai/agents';
import { ConfigError } from '@vime/core';
import { runCli } from '@vime/core/utils';
import { shellFixPolicy } from '@vime/harness/standin';
import { loopMain } from '@vime/loop';
import type { AgentsApi } from '@vime/openai-agents';
import { codingAgent } from './agent.js';

const APIS: readonly AgentsApi[] = ['chat-completions', 'responses'];

/** This program's own flag, `--api`, taken out of the loop's flags. */
function takeApi(argv: string[]): { api: AgentsApi; rest: string[] } {
  const at = argv.indexOf('--api');
  if (at < 0) return { api: 'chat-completions', rest: argv };
  const value = argv[at + 1];
  if (!APIS.includes(value as AgentsApi)) {
    throw new ConfigError(
      `--api: ${JSON.stringify(value ?? '')} is not one of ${APIS.join(', ')}; pass one of them`,
    );
  }
  return { api: value as AgentsApi, rest: [...argv.slice(0, at), ...argv.slice(at + 2)] };
}

// No trace export: the run reaches only its own engine.
setTracingDisabled(true);
await runCli('openai-agents-agent', (argv, io) => {
  const { api, rest } = takeApi(argv);
  return loopMain(rest, io, {
    agent: {
      agent: codingAgent(api),
      standInPolicy: (tasks) => shellFixPolicy(tasks, 'exec_command', 'cmd'),
    },
  });
});
