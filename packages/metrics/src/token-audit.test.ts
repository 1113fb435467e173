import { describe, expect, it } from 'vitest';
import { renderHtmlReport } from './html.js';
import { runReport } from './report.js';
import { tokenAuditRecord } from './run-sections.js';

const step = (n: number, failed: number, seconds: number, handoffSeconds?: number) => ({
  step: n,
  samples: 4,
  failedSamples: failed,
  rollouts: 4,
  failedRollouts: failed,
  tokens: 100,
  causes: failed ? { rollout_log_probs: failed } : {},
  seconds,
  handoffSeconds,
});

describe('the report’s token-audit section', () => {
  it('totals the steps, counts failures by cause, and takes the share over timed hand-offs only', () => {
    const r = tokenAuditRecord([step(1, 1, 0.01, 1), step(2, 2, 0.03, 1), step(3, 0, 0.5)])!;
    expect(r).toMatchObject({
      samples: 12,
      failed_samples: 3,
      rollouts: 12,
      failed_rollouts: 3,
      tokens: 300,
    });
    expect(r.causes).toEqual({ rollout_log_probs: 3 });
    expect(r.share_of_handoff).toBeCloseTo(0.02, 10);
    expect(r.steps.map((s) => s.handoff_seconds)).toEqual([1, 1, null]);
    expect(tokenAuditRecord([])).toBeNull();
  });

  it('is in the record and on the page, and says why when the run has none', () => {
    const record = runReport({ tokenAudit: [step(1, 1, 0.01, 1)] });
    expect(record.token_audit?.failed_rollouts).toBe(1);
    const html = renderHtmlReport(record);
    expect(html).toContain('Token audit at hand-off');
    expect(html).toMatch(/1 rollouts made infrastructure failures \(1 samples\); 1\.00% of hand-off time/);
    expect(runReport({}).absent.token_audit).toMatch(/no step was handed off with the token audit/);
  });
});
