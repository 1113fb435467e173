/**
 * The coding agent, written as the OpenAI Agents SDK's documentation writes one: a `SandboxAgent` with
 * the SDK's own shell capability (`exec_command`), run with `run(agent, input, { sandbox })`. Nothing
 * here knows about training: Vime hands it a model (the capture session) and a sandbox session (the
 * rollout's sandbox), the two lines marked below.
 */
import { type Model, run } from '@openai/agents';
import { SandboxAgent, type SandboxSession, shell } from '@openai/agents/sandbox';
import { type AgentsApi, agentsSdkAgent } from '@vime/openai-agents';

const INSTRUCTIONS = `You are a software engineer fixing a bug in a Python repository.
Explore the code with the shell, find the cause of the issue, and change the source to fix it.
Do not change the tests. When the fix is in place, answer with a short summary and no tool call.`;

function createCodingAgent(model: Model) {
  return new SandboxAgent({
    name: 'Coding agent',
    instructions: INSTRUCTIONS,
    model, // ← the model line: Vime's capture session (`captureAgentsModel`), or any Agents SDK model
    capabilities: [shell()],
  });
}

async function fixIssue(model: Model, sandbox: SandboxSession, prompt: string, signal: AbortSignal) {
  const agent = createCodingAgent(model);
  return run(agent, prompt, {
    maxTurns: 20,
    signal,
    sandbox: { session: sandbox }, // ← the sandbox line: the rollout's Vime sandbox
  });
}

/** The agent as `sweRollout` runs it, over Chat Completions or Responses. */
export const codingAgent = (api: AgentsApi) =>
  agentsSdkAgent(({ model, sandbox, task, signal }) => fixIssue(model, sandbox, task.prompt, signal), {
    api,
  });
