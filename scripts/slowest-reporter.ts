/**
 * A vitest reporter that prints, before vitest's own summary, the test files that took longest (their
 * tests, hooks, import and setup) with their tier: where the suite's time goes, on every run.
 */
import { relative } from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

const SHOWN = 15;

export default class SlowestFiles implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const rows = modules
      .map((m) => {
        const d = m.diagnostic();
        const ms = d.duration + d.collectDuration + d.setupDuration + d.prepareDuration;
        return { file: relative(process.cwd(), m.moduleId), tier: m.project.name, ms };
      })
      .sort((a, b) => b.ms - a.ms)
      .slice(0, SHOWN);
    if (rows.length === 0) return;
    const width = Math.max(...rows.map((r) => r.file.length));
    const lines = rows.map(
      (r) => `  ${(r.ms / 1000).toFixed(1).padStart(7)} s  ${r.tier.padEnd(11)} ${r.file.padEnd(width)}`,
    );
    process.stdout.write(`\n Slowest ${rows.length} test files\n${lines.join('\n')}\n`);
  }
}
