/**
 * Shared by this package's tests: whether a Docker engine socket exists, and the image docker-up.sh imports.
 *
 * @module @vime/sandbox/testing
 */
import { existsSync } from 'node:fs';
import { defaultDockerSocket } from './docker/engine-api.js';

/** The Docker image the sandbox tests use. */
export const testImage = 'vime/sandbox-base:latest';

/** Whether a Docker engine socket exists. */
export function dockerAvailable(): boolean {
  return existsSync(defaultDockerSocket());
}
