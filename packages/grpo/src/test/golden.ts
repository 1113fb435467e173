/** Test helpers: read the committed golden vectors (the repository's `golden/`) and compare with the stated tolerance. */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

export const goldenRoot = fileURLToPath(new URL('../../../../golden/', import.meta.url));
export const dumpsGolden = `${goldenRoot}trainer-dumps/`;

/** Convention dumps for `check --preset auto`: one batch per verl / TRL / OpenRLHF convention. */
export const conventionDumps = `${goldenRoot}convention-dumps/`;

/** The golden folders, one per upstream trainer. */
export type GoldenFolder = 'slime' | 'verl' | 'trl' | 'openrlhf';
const folders: Record<GoldenFolder, string> = {
  slime: 'grpo',
  verl: 'verl',
  trl: 'trl',
  openrlhf: 'openrlhf',
};

export interface GoldenCase {
  source: string;
  case: string;
  description: string;
  params: Record<string, unknown>;
  inputs: Record<string, unknown>;
  expected: Record<string, unknown>;
  dtype: 'float32' | 'float64';
  file: string;
}

const specials: Record<string, number> = { NaN: Number.NaN, Infinity: Infinity, '-Infinity': -Infinity };

function revive(value: unknown): unknown {
  if (typeof value === 'string' && value in specials) return specials[value];
  if (Array.isArray(value)) return value.map(revive);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, revive(v)]));
  }
  return value;
}

export function loadGolden(prefix: string, folder: GoldenFolder = 'slime'): GoldenCase[] {
  const dir = `${goldenRoot}${folders[folder]}/`;
  const files = readdirSync(dir).filter((f) => f.startsWith(prefix) && f.endsWith('.json'));
  if (files.length === 0) throw new Error(`no golden files match ${prefix} in ${dir}`);
  return files.sort().map((file) => {
    const raw = JSON.parse(readFileSync(dir + file, 'utf8')) as Omit<GoldenCase, 'file'>;
    return { ...(revive(raw) as Omit<GoldenCase, 'file'>), file };
  });
}

/** Every golden file of a folder, for the coverage checks. */
export function allGoldenFiles(folder: GoldenFolder = 'slime'): string[] {
  return readdirSync(`${goldenRoot}${folders[folder]}/`).filter((f) => f.endsWith('.json'));
}

export function flat(value: unknown): number[] {
  return (value as unknown[]).flat(Infinity as 1) as number[];
}

/** Tolerance per dtype: float32 `1e-6 + 1e-5·|e|` (the stated bound), float64 ~1e-12. */
export function expectClose(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  name: string,
  dtype: 'float32' | 'float64' = 'float32',
): void {
  expect(actual.length, `${name}: length`).toBe(expected.length);
  const [abs, rel] = dtype === 'float32' ? [1e-6, 1e-5] : [1e-12, 1e-12];
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    if (Number.isNaN(e)) {
      expect(Number.isNaN(a), `${name}[${i}]: expected NaN, got ${a}`).toBe(true);
      continue;
    }
    const ok = Math.abs(a - e) <= abs + rel * Math.abs(e);
    expect(ok, `${name}[${i}]: got ${a}, expected ${e} (|diff| ${Math.abs(a - e)})`).toBe(true);
  }
}

/** How many values are bitwise equal (float32 results match the trainer exactly where it is deterministic). */
export function exactCount(actual: ArrayLike<number>, expected: ArrayLike<number>): number {
  let same = 0;
  for (let i = 0; i < expected.length; i++) if (Object.is(actual[i], expected[i])) same++;
  return same;
}

/**
 * float32: every value bit for bit (−0 and +0 count as equal; NaN matches NaN), as the trainer computes
 * it on CPU. float64: within 1e-12 (reductions are not emulated in float64 summation order).
 */
export function expectExact(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  name: string,
  dtype: 'float32' | 'float64' = 'float32',
): void {
  if (dtype === 'float64') {
    expectClose(actual, expected, name, 'float64');
    return;
  }
  expect(actual.length, `${name}: length`).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    const same = a === e || (Number.isNaN(a) && Number.isNaN(e));
    expect(same, `${name}[${i}]: got ${a}, expected ${e} bit for bit (|diff| ${Math.abs(a - e)})`).toBe(true);
  }
}
