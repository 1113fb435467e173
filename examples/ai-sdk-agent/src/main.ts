#!/usr/bin/env node
/**
 * `ai-sdk-agent [flags of vime-loop]`: the coding-agent RL loop of `@vime/loop` with the AI SDK agent of
 * `agent.ts` for every sample. Without `--engine-url` a stand-in engine answers: a scripted fix in this
 * agent's `bash` tool calls, not a model.
 */
import { runCli } from '@vime/core/utils';
import { shellFixPolicy } from '@vime/harness/standin';
import { loopMain } from '@vime/loop';
import { codingAgent } from './agent.js';

await runCli('ai-sdk-agent', (argv, io) =>
  loopMain(argv, io, {
    agent: { agent: codingAgent, standInPolicy: (tasks) => shellFixPolicy(tasks, 'bash', 'command') },
  }),
);
