// The offline task set's fixed facts: names, git environment, where its sources live, its repo profile.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '@vime/core';
import { OFFLINE_TEST_COMMAND, resolveProfile, type SweProfile } from '../profiles.js';

export { OFFLINE_TEST_COMMAND };

/** Bump when the generator's output for the same sources changes, so cached builds are rebuilt. */
export const GENERATOR_VERSION = 3;
export const OFFLINE_OWNER = 'vime';
export const OFFLINE_REPO = 'toolbelt';

/** Keeps pytest's and Python's caches out of `git add -A`, so they never enter a captured patch. */
export const LIBRARY_GITIGNORE = '__pycache__/\n*.pyc\n.pytest_cache/\n';

/** Deterministic commits: same sources, same SHAs. */
export const OFFLINE_GIT_ENV = {
  GIT_AUTHOR_NAME: 'Vime Tasks',
  GIT_AUTHOR_EMAIL: 'tasks@vime.invalid',
  GIT_AUTHOR_DATE: '2025-01-01T00:00:00Z',
  GIT_COMMITTER_NAME: 'Vime Tasks',
  GIT_COMMITTER_EMAIL: 'tasks@vime.invalid',
  GIT_COMMITTER_DATE: '2025-01-01T00:00:00Z',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_TERMINAL_PROMPT: '0',
};

/** A kind of bug the offline task set's mutations make. */
export type BugKind =
  | 'func_pm_op_change'
  | 'func_pm_flip_operators'
  | 'func_pm_op_swap'
  | 'func_pm_op_change_const'
  | 'func_pm_off_by_one'
  | 'func_pm_remove_cond'
  | 'func_pm_swap_args'
  | 'combine_file';

/** Where the library and the mutation lister live: next to `src/` and `dist/` alike. */
export function offlineAssetsDir(): string {
  // `src/offline/` from source, `dist/` from the build.
  for (const rel of ['../../offline-tasks/', '../offline-tasks/']) {
    const dir = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(join(dir, 'mutations.py'))) return dir;
  }
  const dir = fileURLToPath(new URL('../../offline-tasks/', import.meta.url));
  throw new ConfigError(
    `offline task assets were not found at ${dir} (they ship in @vime/swe's offline-tasks/); reinstall @vime/swe`,
  );
}

/** The profile of the offline repository (registered with the built-in profiles, like SWE-smith's own repos). */
export function offlineProfile(): SweProfile {
  return resolveProfile(`${OFFLINE_OWNER}__${OFFLINE_REPO}`);
}

/** `….func_pm_op_swap__1a2b3c4d` → `func_pm_op_swap`. */
export function bugKindOf(instanceId: string): string {
  const last = instanceId.slice(instanceId.lastIndexOf('.') + 1);
  return last.replace(/__[a-z0-9]+$/, '');
}
