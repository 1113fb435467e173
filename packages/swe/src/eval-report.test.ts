/**
 * Grading outcomes from the reference table of SWE-bench v4.1.0 / SWE-smith vs SWE-bench main
 * (F2P = [a], P2P = [b] unless noted), and the log-level guards.
 */
import { describe, expect, it } from 'vitest';
import { type GradingSemantics, getLogsEval, gradeReport, readTestOutput } from './eval-report.js';
import { parseTestLog } from './parsers/index.js';

const resolution = (
  statusMap: Record<string, string>,
  semantics: GradingSemantics,
  f2p: string[] = ['a'],
  p2p: string[] = ['b'],
) => gradeReport({ statusMap, failToPass: f2p, passToPass: p2p }, { semantics }).resolution;

describe('resolution by semantics', () => {
  it.each([
    ['a SKIPPED', { a: 'SKIPPED', b: 'PASSED' }, 'RESOLVED_FULL', 'RESOLVED_NO'],
    ['a XFAIL', { a: 'XFAIL', b: 'PASSED' }, 'RESOLVED_FULL', 'RESOLVED_FULL'],
    ['b SKIPPED', { a: 'PASSED', b: 'SKIPPED' }, 'RESOLVED_FULL', 'RESOLVED_FULL'],
    ['a missing', { b: 'PASSED' }, 'RESOLVED_NO', 'RESOLVED_NO'],
    ['a ERROR', { a: 'ERROR', b: 'PASSED' }, 'RESOLVED_NO', 'RESOLVED_NO'],
    ['a unknown status', { a: 'XPASS', b: 'PASSED' }, 'RESOLVED_FULL', 'RESOLVED_FULL'],
    ['{}', {}, 'RESOLVED_NO', 'RESOLVED_NO'],
  ] as const)('%s', (_name, map, parity, main) => {
    expect(resolution(map, 'swesmith')).toBe(parity);
    expect(resolution(map, 'swebench-v4.1.0')).toBe(parity);
    expect(resolution(map, 'swebench-main')).toBe(main);
  });

  it('an empty F2P list with passing P2P is FULL everywhere', () => {
    for (const s of ['swesmith', 'swebench-v4.1.0', 'swebench-main'] as const) {
      expect(resolution({ b: 'PASSED' }, s, [])).toBe('RESOLVED_FULL');
    }
  });

  it('main matches an id the parser cut at a space by prefix; v4.1.0 does not', () => {
    const map = { 'p[a b]': 'PASSED', b: 'PASSED' };
    expect(resolution(map, 'swebench-v4.1.0', ['p[a'])).toBe('RESOLVED_NO');
    expect(resolution(map, 'swebench-main', ['p[a'])).toBe('RESOLVED_FULL');
  });

  it('fail_only counts only an explicit FAILED', () => {
    const report = gradeReport(
      { statusMap: {}, failToPass: ['a'], passToPass: ['b'] },
      { evalType: 'fail_only' },
    );
    expect(report.resolution).toBe('RESOLVED_FULL');
  });

  it('PARTIAL needs some F2P passing and every P2P passing', () => {
    expect(resolution({ a1: 'PASSED', a2: 'FAILED', b: 'PASSED' }, 'swesmith', ['a1', 'a2'])).toBe(
      'RESOLVED_PARTIAL',
    );
    expect(resolution({ a1: 'PASSED', a2: 'FAILED', b: 'FAILED' }, 'swesmith', ['a1', 'a2'])).toBe(
      'RESOLVED_NO',
    );
  });

  it('rejects unknown options with the value and the choices', () => {
    expect(() =>
      gradeReport({ statusMap: {}, failToPass: [], passToPass: [] }, { semantics: 'lenient' as never }),
    ).toThrow(/semantics must be "swesmith", "swebench-v4.1.0" or "swebench-main", got "lenient"/);
  });
});

describe('log guards', () => {
  const spoofed = [
    "+ : '>>>>> Start Test Output'",
    'FAILED tests/t.py::a - assert 1 == 2',
    '============================== 1 failed in 0.10s ===============================',
    'PASSED tests/t.py::a',
    'VIME_TEST_EXIT_CODE=1',
    "+ : '>>>>> End Test Output'",
    '>>>>> Test Exit Code: 1',
  ].join('\n');
  const parse = (text: string) => parseTestLog(text, { parser: 'pytest' });

  it('v4.1.0 takes a spoofed log at its word; main rejects it on the exit code', () => {
    expect(getLogsEval(spoofed, parse, 'v4.1.0')).toEqual({
      statusMap: { 'tests/t.py::a': 'PASSED' },
      found: true,
    });
    expect(getLogsEval(spoofed, parse, 'main')).toEqual({ statusMap: {}, found: false });
  });

  it('a timeout or an apply failure means no results', () => {
    expect(getLogsEval(`${spoofed}\n>>>>> Tests Timed Out: 90 seconds exceeded`, parse)).toEqual({
      statusMap: {},
      found: false,
    });
    expect(readTestOutput(`${spoofed}\n>>>>> Tests Timed Out`)).toEqual({ content: null, found: false });
    expect(getLogsEval('>>>>> Patch Apply Failed\n', parse)).toEqual({ statusMap: {}, found: false });
  });

  it('readTestOutput refuses markers out of order', () => {
    expect(() => readTestOutput("+ : '>>>>> End Test Output'\n+ : '>>>>> Start Test Output'\n")).toThrow(
      /before the start marker/,
    );
  });
});
