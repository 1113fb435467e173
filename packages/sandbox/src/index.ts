/**
 * Sandboxes for an agent's untrusted commands and a repository's tests: one provider interface with four
 * backends (bubblewrap, the Docker Engine API, Kubernetes pods, local processes), warm pools, and a lifecycle that never leaks
 * (labels, exit handlers, lifetime timers, `reapOrphans`).
 *
 * @module @vime/sandbox
 */
/** Output capture, from @vime/core/utils (it runs this package's host processes). */
export { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, decodeUtf8 } from '@vime/core/utils';
export { type BubblewrapProviderOptions, bubblewrapProvider } from './bubblewrap/provider.js';
export { PROXY_CHANNEL_PORT, PROXY_SOCKET_IN_SANDBOX } from './channel.js';
export {
  DOCKER_API_MAX,
  DOCKER_API_MIN,
  type DockerEndpoint,
  DockerEngine,
  type DockerTls,
  defaultDockerSocket,
} from './docker/engine-api.js';
export {
  followProgress,
  type ImagePresence,
  type ImageProgress,
  inspectImages,
  type PullOptions,
  pullImage,
  pushImage,
} from './docker/images.js';
export {
  DEFAULT_DOCKER_IMAGE,
  type DockerProviderOptions,
  type DockerUlimit,
  dockerProvider,
  HOST_USR_LABEL,
} from './docker/provider.js';
export { BACKEND_LOST, SandboxRateLimited } from './errors.js';
export { type DockerBackendOptions, dockerBackend } from './fleet/docker.js';
export {
  BACKEND_LABEL,
  type FleetBackend,
  type FleetBackendStats,
  type FleetOptions,
  type FleetProvider,
  fleetProvider,
} from './fleet/fleet.js';
export {
  type DetachedOptions,
  execDetached,
  isTransientFailure,
  runSetup,
  type SetupOptions,
  stageFiles,
  TRANSIENT_OUTPUT,
} from './helpers.js';
export { type LocalProviderOptions, localProvider } from './host/local-provider.js';
export { defaultRootDir } from './host/state.js';
export type { ImageConfig } from './images/archive.js';
export { canonicalImage, type ImageReference, parseImageReference } from './images/reference.js';
export {
  defaultImageCacheDir,
  type ImageRootfs,
  ImageStore,
  type ImageStoreOptions,
  type ResolveOptions,
} from './images/store.js';
export type { AgentSandboxOptions } from './kubernetes/agent-sandbox.js';
export { type KubeConnection, KubernetesRateLimitError } from './kubernetes/client.js';
export {
  DEFAULT_ACTIVE_DEADLINE_SECONDS,
  type KubernetesProviderOptions,
  kubernetesProvider,
} from './kubernetes/provider.js';
export { KubernetesSandbox } from './kubernetes/sandbox.js';
export {
  CREATED_LABEL,
  defaultRunId,
  liveSandboxCount,
  OWNER_LABEL,
  RUN_LABEL,
  SANDBOX_LABEL,
  terminateAll,
} from './lifecycle.js';
export {
  DEFAULT_LIMITS,
  type EffectiveLimits,
  LIMIT_NAMES,
  type LimitName,
  resolveLimits,
  resolveWorkdir,
} from './limits.js';
export { MAX_POOL_NAME_LENGTH, poolName } from './names.js';
export { DEFAULT_MAX_READ_BYTES } from './output.js';
export { POOL_LABEL, WarmPool, type WarmPoolOptions, type WarmPoolStats } from './pool.js';
export { type ProviderForOptions, type ProviderKind, providerFor } from './provider-for.js';
export {
  type ReapedSandbox,
  type ReapOptions,
  type ReapReport,
  reapEngineOrphans,
  reapOrphans,
} from './reap.js';
export type {
  ExecOptions,
  ExecResult,
  OpOptions,
  ProxyChannel,
  ReadOnlyBind,
  ReadOptions,
  ResourceLimits,
  Sandbox,
  SandboxCapabilities,
  SandboxEmitter,
  SandboxEvents,
  SandboxProvider,
  SandboxSpec,
  TerminateReason,
} from './types.js';
