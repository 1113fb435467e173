/**
 * Shared by the tests of the packages that run sandboxes: whether a Docker engine and root are here, and
 * the image docker-up.sh imports.
 *
 * @module @vime/sandbox/testing
 */
import { existsSync } from 'node:fs';
import { available } from '@vime/core/testing';
import { defaultDockerSocket } from './docker/engine-api.js';

/** The Docker image the sandbox tests use. */
export const testImage = 'vime/sandbox-base:latest';

/** Whether a Docker engine's socket exists (`DOCKER_HOST` or the default one). */
export function dockerAvailable(): boolean {
  return existsSync(defaultDockerSocket());
}

/**
 * Whether the following tests may use a Docker engine: there is one (as root, scripts/test.sh starts a
 * private one, so one is expected). When there is none they are skipped with the reason printed, or,
 * under `VIME_REQUIRE_ALL=1` (CI), a test fails saying so.
 */
export function dockerForTests(): boolean {
  return available(
    'Docker engine',
    process.getuid?.() === 0 || dockerAvailable(),
    'Start one: as root, `source scripts/docker-up.sh` (scripts/test.sh does), or set DOCKER_HOST.',
  );
}

/** Whether the following tests may run as root (cgroups, tmpfs mounts, other uids); as `dockerForTests`. */
export function rootForTests(): boolean {
  return available('root', process.getuid?.() === 0, 'Run the tests as root (CI does).');
}
