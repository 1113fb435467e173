export {
  CLAUDE_CODE_TOOLS,
  claudeCodeLaunch,
  codexLaunch,
  HARNESS_HOME,
  HARNESS_LAUNCHERS,
  HARNESS_MOUNT,
  type HarnessLaunch,
  type HarnessLaunchInput,
  harnessBin,
} from './adapters.js';
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
  tarballUrl,
} from './install.js';
export {
  AGENT_KINDS,
  type AgentKind,
  agentOf,
  type HarnessRun,
  type HarnessRunOptions,
  harnessSandboxSpec,
  runHarness,
} from './run.js';
