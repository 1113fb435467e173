// Shared by this package's tests: whether a Docker engine socket exists, and the image docker-up.sh imports.
import { existsSync } from 'node:fs';
import { defaultDockerSocket } from './docker/engine-api.js';

export const testImage = 'vime/sandbox-base:latest';

export function dockerAvailable(): boolean {
  return existsSync(defaultDockerSocket());
}
