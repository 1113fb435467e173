/**
 * The coding agent, written as the AI SDK's documentation writes one: a `ToolLoopAgent` with tools whose
 * `execute` works through `experimental_sandbox`. Nothing here knows about training: Vime hands it a
 * model (the capture session) and a sandbox (the rollout's), the two lines marked below.
 */
import { aiSdkAgent } from '@vime/ai-sdk';
import { isStepCount, type LanguageModel, ToolLoopAgent, tool } from 'ai';
import { z } from 'zod';

const INSTRUCTIONS = `You are a software engineer fixing a bug in a Python repository.
Explore the code with the bash tool, find the cause of the issue, and change the source to fix it.
Do not change the tests. When the fix is in place, answer with a short summary and no tool call.`;

/** The agent of the coding task: bash, read and write tools over the sandbox it is given. */
function createCodingAgent(model: LanguageModel) {
  return new ToolLoopAgent({
    model, // ← the model line: Vime's capture session (`captureModel`), or any AI SDK model
    instructions: INSTRUCTIONS,
    tools: {
      bash: tool({
        description: 'Run a shell command in the repository and return its exit code and output.',
        inputSchema: z.object({ command: z.string().describe('The command, run by sh -c') }),
        execute: async ({ command }, { experimental_sandbox: sandbox }) => {
          const { exitCode, stdout, stderr } = await sandbox!.run({ command });
          return { exitCode, stdout: stdout.slice(-10_000), stderr: stderr.slice(-2_000) };
        },
      }),
      readFile: tool({
        description: 'Read a text file of the repository.',
        inputSchema: z.object({ path: z.string() }),
        execute: async ({ path }, { experimental_sandbox: sandbox }) =>
          (await sandbox!.readTextFile({ path })) ?? `${path}: no such file`,
      }),
      writeFile: tool({
        description: 'Write a text file of the repository (the whole content).',
        inputSchema: z.object({ path: z.string(), content: z.string() }),
        execute: async ({ path, content }, { experimental_sandbox: sandbox }) => {
          await sandbox!.writeTextFile({ path, content });
          return `wrote ${path}`;
        },
      }),
    },
    stopWhen: isStepCount(20),
  });
}

/** The agent as `sweRollout` runs it: one `generate` per rollout, on the session's model and sandbox. */
export const codingAgent = aiSdkAgent(({ model, sandbox, task, abortSignal }) =>
  createCodingAgent(model).generate({
    prompt: task.prompt,
    experimental_sandbox: sandbox, // ← the sandbox line: the rollout's Vime sandbox
    abortSignal,
  }),
);
