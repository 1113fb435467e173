/** The procedural task family's pure part: operators, the bank, determinism, the tests' text, the split. */
import { describe, expect, it } from 'vitest';
import {
  cleanSource,
  mutatedSource,
  mutateSite,
  OPERATOR_FAMILIES,
  proceduralCandidate,
  sitesOf,
  splitOf,
  testFileText,
} from './procedural.js';
import { TEMPLATES } from './procedural-templates.js';

const site = (kind: Parameters<typeof mutateSite>[0]['kind'], text: string) => ({
  kind,
  text,
  start: 0,
  end: 0,
});

describe('procedural operators', () => {
  it('flip a comparison, change an operator, move a constant, shift or drop a bound, swap arguments, drop a branch', () => {
    expect(mutateSite(site('cmp', '<'), 0)).toBe('<=');
    expect(mutateSite(site('cmp', '>='), 0)).toBe('>');
    expect(mutateSite(site('cmp', '=='), 0)).toBe('!=');
    expect(mutateSite(site('op', '+'), 0)).toBe('-');
    expect(mutateSite(site('op', '*'), 0)).toBe('+');
    expect(mutateSite(site('const', '100'), 0)).toBe('102');
    expect(mutateSite(site('const', '100'), 0.99)).toBe('91');
    expect(mutateSite(site('const', '0'), 0.99)).toBe('9');
    expect(mutateSite(site('const', '-1'), 0)).toBe('1');
    expect(mutateSite(site('obo', 'len(xs)'), 0.2)).toBe('len(xs) - 1');
    expect(mutateSite(site('obo', 'len(xs)'), 0.7)).toBe('len(xs) + 1');
    expect(mutateSite(site('obodrop', ' + 1'), 0)).toBe('');
    expect(mutateSite(site('args', 'a, b'), 0)).toBe('b, a');
    expect(mutateSite(site('branch', '    if x:\n        return 0\n'), 0)).toBe('');
  });

  it('refuses a site its operator cannot change', () => {
    expect(() => mutateSite(site('cmp', 'is'), 0)).toThrow(/cmp site "is" has no mutation/);
    expect(() => mutateSite(site('args', 'a, b, c'), 0)).toThrow(/args site/);
  });

  it('reads the marked sites and writes the clean and the mutated code', () => {
    const marked = 'if x ⟨cmp:<⟩ ⟨const:10⟩:\n    y = x ⟨op:+⟩ 1\n';
    expect(sitesOf(marked).map((s) => [s.kind, s.text])).toEqual([
      ['cmp', '<'],
      ['const', '10'],
      ['op', '+'],
    ]);
    expect(cleanSource(marked)).toBe('if x < 10:\n    y = x + 1\n');
    expect(mutatedSource(marked, sitesOf(marked)[2]!, 0)).toBe('if x < 10:\n    y = x - 1\n');
  });
});

describe('the function bank', () => {
  it('reaches every operator family, and every site of every template has a mutation', () => {
    const fixed = { pick: <T>(items: readonly T[]) => items[0]!, int: (low: number) => low };
    const kinds = new Set<string>();
    for (const t of TEMPLATES) {
      const spec = t.build(fixed);
      expect(spec.cases.length, t.id).toBeGreaterThanOrEqual(4);
      expect(spec.source, t.id).toContain(`def ${spec.name}(`);
      for (const s of sitesOf(spec.source)) {
        kinds.add(s.kind);
        expect(mutateSite(s, 0.3), `${t.id} ${s.kind}`).not.toBe(s.text);
      }
    }
    expect([...kinds].sort()).toEqual(['args', 'branch', 'cmp', 'const', 'obo', 'obodrop', 'op']);
  });
});

describe('procedural candidates', () => {
  it('are deterministic from the seed and the attempt, and differ across seeds', () => {
    for (const family of OPERATOR_FAMILIES) {
      expect(proceduralCandidate(5, 3, family)).toEqual(proceduralCandidate(5, 3, family));
    }
    const a = proceduralCandidate(1, 0, 'flip_comparison');
    const b = proceduralCandidate(2, 0, 'flip_comparison');
    expect(JSON.stringify(a.cleanFiles)).not.toBe(JSON.stringify(b.cleanFiles));
  });

  it('put one bug of the family in the target function only, in a repository of four functions', () => {
    for (let index = 0; index < 30; index++) {
      const family = OPERATOR_FAMILIES[index % OPERATOR_FAMILIES.length]!;
      const c = proceduralCandidate(7, index, family);
      expect(c.family).toBe(family);
      expect(c.functions).toHaveLength(4);
      expect(new Set(c.functions.map((f) => f.name)).size).toBe(4);
      const target = c.functions[c.target]!;
      expect(c.buggyFile.file).toBe(target.file);
      expect(c.buggyFile.content).not.toBe(c.cleanFiles[target.file]);
      // Nothing else changed: every other function of the file is there as it was; the target is not.
      for (const f of c.functions.filter((f) => f.file === target.file && f !== target))
        expect(c.buggyFile.content).toContain(cleanSource(f.source));
      expect(c.buggyFile.content).not.toContain(cleanSource(target.source));
      expect(Object.keys(c.cleanFiles)).toContain(`${c.packageName}/__init__.py`);
      expect(c.buggyFile.content).not.toContain('⟨');
    }
  });
});

describe('test files', () => {
  it('assert with a message naming the function, the input, the actual and the expected value', () => {
    const c = proceduralCandidate(1, 0, 'wrong_constant');
    const f = c.functions[0]!;
    const text = testFileText(
      f,
      f.cases.map(() => "'x'"),
    );
    expect(text).toContain(`from ${f.module} import ${f.name}`);
    expect(text).toContain(`def test_${f.name}_1():`);
    expect(text).toContain(`returned {actual!r}, expected 'x'`);
    expect(text.match(/^def test_/gm)).toHaveLength(f.cases.length);
  });
});

describe('splits', () => {
  it('hold out the whole family, and a seeded share of the rest', () => {
    const options = { heldoutFamily: 'swapped_args' as const, heldoutFraction: 0.25, seed: 1 };
    expect(splitOf('swapped_args', { ...options, key: 'a' })).toBe('heldout_family');
    const splits = Array.from({ length: 400 }, (_, i) => splitOf('off_by_one', { ...options, key: `k${i}` }));
    expect(splits).toEqual(
      Array.from({ length: 400 }, (_, i) => splitOf('off_by_one', { ...options, key: `k${i}` })),
    );
    const heldout = splits.filter((s) => s === 'heldout').length;
    expect(heldout).toBeGreaterThan(60);
    expect(heldout).toBeLessThan(140);
    expect(splits.every((s) => s === 'heldout' || s === 'train')).toBe(true);
    expect(splitOf('off_by_one', { ...options, heldoutFraction: 0, key: 'k1' })).toBe('train');
    expect(splitOf('off_by_one', { ...options, heldoutFamily: undefined, key: 'k1' })).not.toBe(
      'heldout_family',
    );
  });
});
