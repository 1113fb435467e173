/**
 * Every test file is in exactly one tier by its name, and a unit test really is one: it starts no child
 * process, sandbox, Python, Chromium or loop, itself or through its test helpers.
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { testFiles, tierOf, unitViolations } from './test-tiers.js';

const root = fileURLToPath(new URL('../', import.meta.url));
const files = testFiles(root);

describe('test tiers', () => {
  it('finds the suite', () => {
    expect(files.length).toBeGreaterThan(100);
  });

  it('every unit test is a unit test (else its name says .int.test.ts or .attack.test.ts)', () => {
    const misplaced = files
      .filter((f) => tierOf(f) === 'unit')
      .map((f) => ({ file: f, uses: unitViolations(`${root}${f}`) }))
      .filter((f) => f.uses.length > 0)
      .map((f) => `${f.file} uses ${f.uses.join(', ')}: name it *.int.test.ts`);
    expect(misplaced).toEqual([]);
  });
});
