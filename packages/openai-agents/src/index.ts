/**
 * OpenAI Agents SDK agents as the policy harness: a capture session as the Agents SDK's model (Chat
 * Completions or Responses: `captureAgentsModel`, `captureModelProvider`), Vime sandboxes behind its
 * sandbox interfaces (`agentsSandboxSession`, `agentsSandboxClient`), and `agentsSdkAgent`, which runs the
 * user's Agents SDK agent as the agent of `sweRollout`.
 *
 * @module @vime/openai-agents
 */
export {
  type AgentsSdkAgentFunction,
  type AgentsSdkAgentInput,
  type AgentsSdkAgentOptions,
  agentsSdkAgent,
} from './agent.js';
export {
  type AgentsApi,
  type CaptureAgentsModelOptions,
  captureAgentsModel,
  captureModelProvider,
} from './model.js';
export {
  AGENTS_COMMAND_TIMEOUT_EXIT,
  type AgentsSandboxClientOptions,
  type AgentsSandboxOptions,
  agentsSandboxClient,
  agentsSandboxSession,
} from './sandbox.js';
