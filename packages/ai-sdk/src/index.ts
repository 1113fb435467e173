/**
 * AI SDK agents as the policy harness: a capture session as an AI SDK `LanguageModel`
 * (`captureModel`), a Vime sandbox as the AI SDK's sandbox session (`aiSandbox`), and `aiSdkAgent`, which
 * runs the user's AI SDK agent as the agent of `sweRollout`.
 *
 * @module @vime/ai-sdk
 */
export {
  type AiSdkAgentFunction,
  type AiSdkAgentInput,
  type AiSdkAgentOptions,
  type AiSdkAgentResult,
  aiSdkAgent,
} from './agent.js';
export { type CaptureModelOptions, captureModel } from './model.js';
export { type AiSandboxOptions, aiSandbox, COMMAND_TIMEOUT_EXIT } from './sandbox.js';
