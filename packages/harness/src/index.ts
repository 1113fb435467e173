/**
 * The agents a rollout runs: mini-swe-agent's protocol over an OpenAI client, and Claude Code, Codex,
 * opencode (pinned, integrity-checked platform binaries), Qwen Code, pi and Gemini CLI (pinned JavaScript
 * CLIs on a pinned Node) run headless in a sandbox that reaches only the capture proxy; `harnessAgent(kind)` is the agent `sweRollout` runs.
 *
 * @module @vime/harness
 */
export {
  CLAUDE_CODE_TOOLS,
  claudeCodeLaunch,
  codexLaunch,
  GEMINI_CLI_SETTINGS,
  geminiCliLaunch,
  HARNESS_HOME,
  HARNESS_LAUNCHERS,
  HARNESS_MOUNT,
  type HarnessLaunch,
  type HarnessLaunchInput,
  harnessBin,
  harnessCommand,
  NODE_MOUNT,
  opencodeLaunch,
  piLaunch,
  QWEN_CODE_SETTINGS,
  qwenCodeLaunch,
} from './adapters.js';
export { agentOfTask, type HarnessAgentOptions, harnessAgent, harnessTranscript } from './agent.js';
export { HarnessError } from './errors.js';
export {
  DEFAULT_NPM_REGISTRY,
  defaultHarnessCacheDir,
  HARNESS_PACKAGES,
  type HarnessKind,
  type HarnessPackage,
  type InstalledHarness,
  type InstallOptions,
  installHarness,
  NODE_RUNTIME,
  tarballUrl,
} from './install.js';
export {
  type AgentOptions,
  type AgentResult,
  type ExitStatus,
  parseActions,
  runAgent,
} from './mini-swe-agent/agent.js';
export { ACTION_FENCE, OBSERVATION_LIMIT, SUBMIT_SENTINEL } from './mini-swe-agent/templates.js';
export {
  AGENT_KINDS,
  type AgentKind,
  agentOf,
  type HarnessRun,
  type HarnessRunOptions,
  harnessSandboxSpec,
  runHarness,
} from './run.js';
