/**
 * The pieces every provider builds on, for providers that live in other packages (the hosted ones in
 * `@vime/sandbox-hosted`): run labels and sandbox ids, the leak-proofing registry and lifetime timers,
 * operation tracking around terminate, read-back caps, and path resolution under the work dir.
 *
 * @module @vime/sandbox/kit
 */
export { sandboxPath } from './host/sandbox.js';
export {
  forwardWarnings,
  idOfRun,
  isOwnerAlive,
  newSandboxId,
  onProcessExit,
  type RegisterOptions,
  register,
  runOf,
  runTag,
  sandboxLabels,
  type Terminable,
  withTrackedCreate,
} from './lifecycle.js';
export { checkLifetime, resolveWorkdir } from './limits.js';
export { SandboxOps, type SandboxOpsInit } from './ops.js';
export { readCap, tailOf, tooLarge } from './output.js';
export { EXEC_MARKER_ENV, KILL_MARKED, newExecId } from './process-markers.js';
