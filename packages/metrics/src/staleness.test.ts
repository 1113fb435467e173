import { describe, expect, it } from 'vitest';
import { weightStaleness } from './staleness.js';

describe('weightStaleness', () => {
  it('counts versions spanned per row and the lag behind the newest version, numerically ordered', () => {
    const s = weightStaleness([
      { weight_versions: ['10', '11'] },
      { weight_versions: ['11'] },
      { weight_versions: ['9'] },
      { weight_versions: [] },
    ]);
    expect(s).toEqual({
      rows: 4,
      versionedRows: 3,
      mixedRows: 1,
      maxVersionsPerRow: 2,
      meanVersionsPerRow: 4 / 3,
      maxLag: 2,
      meanLag: 1,
      versions: ['9', '10', '11'],
    });
  });

  it('orders non-numeric versions by first appearance', () => {
    const s = weightStaleness([{ weight_versions: ['step-b'] }, { weight_versions: ['step-a', 'step-b'] }]);
    expect(s.versions).toEqual(['step-b', 'step-a']);
    expect(s.maxLag).toBe(1);
  });

  it('is all zeros for an empty batch', () => {
    expect(weightStaleness([])).toMatchObject({ rows: 0, maxLag: 0, maxVersionsPerRow: 0 });
  });
});
