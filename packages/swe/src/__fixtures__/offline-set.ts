import { inject } from 'vitest';
import { buildOfflineTaskSet, type OfflineTaskSet } from '../offline/build.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Where the test run's global setup built the offline task set (scripts/test-setup.ts). */
    offlineTasksDir: string;
  }
}

/** The offline task set the global setup built for this test run (a reuse, not a rebuild). */
export function sharedOfflineSet(): Promise<OfflineTaskSet> {
  return buildOfflineTaskSet({ dir: inject('offlineTasksDir') });
}
