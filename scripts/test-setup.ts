/**
 * vitest global setup: the offline task set, built once per source version into a cache folder and
 * shared by every test file that needs one (`sharedOfflineSet()` in @vime/swe's fixtures), instead of one
 * build per file.
 */
import { fileURLToPath } from 'node:url';
import { buildOfflineTaskSet } from '@vime/swe';
import type { TestProject } from 'vitest/node';

export default async function setup(project: TestProject): Promise<void> {
  const dir = fileURLToPath(new URL('../node_modules/.cache/vime/offline-tasks/', import.meta.url));
  const set = await buildOfflineTaskSet({ dir });
  (project.provide as (key: string, value: unknown) => void)('offlineTasksDir', set.dir);
}
