/** Shared cases and checks of the hardening suites (hardening*.test.ts). */
import { randomInt } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { type AttackCase, type CaseResult, runCase } from './attacks.js';
import {
  assertReadableByOthers,
  isRoot,
  OTHER_UID,
  runFixture,
  userDir,
} from './support.js';
import { DEFAULT_LIMITS } from '../limits.js';
import { dockerForTests } from '../testing.js';


/** Folders the cases made; each test file removes them after all its tests (`removeDirs`). */
export const dirs: string[] = [];
export function removeDirs(): void {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}

/**
 * Run cases in this process (root in CI), or all in one fixture process as an unprivileged user (one
 * process start for the lot); returns the results by case name.
 */
export async function attacks(cases: AttackCase[], asOther: boolean): Promise<Map<string, CaseResult>> {
  const dir = userDir('vime-hardening-', asOther);
  dirs.push(dir);
  let results: CaseResult[] = [];
  if (asOther) {
    assertReadableByOthers();
    const file = join(dir, 'cases.json');
    writeFileSync(file, JSON.stringify(cases));
    results = await runFixture<CaseResult[]>('attacks', [join(dir, 'root'), file], {
      asOther: true,
      home: dir,
    });
  } else {
    for (const c of cases) results.push(await runCase(join(dir, 'root'), c));
  }
  return new Map(results.map((r) => [r.name, r]));
}

export const users: Array<[string, boolean]> = isRoot
  ? [
      ['root', false],
      [`uid ${OTHER_UID}`, true],
    ]
  : [['this user', false]];
export const withDocker = dockerForTests();
export const MiB = 1 << 20;
export const py = (code: string) => ['python3', '-c', code];
/** Started before a bomb: records in /testbed/max the most processes a listing of /proc showed. */
export const MONITOR =
  'python3 -c \'import os, time\nm = 0\nend = time.time() + 5\nwhile time.time() < end:\n    m = max(m, sum(1 for p in os.listdir("/proc") if p.isdigit()))\n    open("/testbed/max", "w").write(str(m))\n    time.sleep(0.05)\' & sleep 0.3;';
let nextTag = 810_000 + randomInt(80_000);
export const tag = () => nextTag++;

/** A bomb ran into its timeout, filled the sandbox to about its pids limit and no further; usable after. */
export function bombContained(r: CaseResult): void {
  expect(r.steps[0]!.timedOut).toBe(true);
  const [ok, max] = r.steps[1]!.stdout.trim().split('\n');
  expect(ok, JSON.stringify(r.steps[1])).toBe('ok');
  // The most processes a listing of the sandbox's /proc showed while the bomb ran (a listing taken while
  // processes come and go may over-count a little); unbounded, it grows to the host's pid_max.
  expect(Number(max)).toBeGreaterThan(DEFAULT_LIMITS.pids! / 2);
  expect(Number(max)).toBeLessThan(2 * DEFAULT_LIMITS.pids!);
}

