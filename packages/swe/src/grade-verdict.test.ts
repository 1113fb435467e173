/**
 * The verdict of a runner's frame, record by record: a pass needs pytest's reports and the plugin's own
 * call record to agree, the dataset's ids match the way its parser names tests, canaries are judged,
 * and only `PASSED` passes a F2P or P2P test (strict keeps SWE-bench main's skipped-P2P exception).
 */
import { describe, expect, it } from 'vitest';
import type { RunFrame, RunRecord } from './grade-run.js';
import { gradingStatusMap, judgeFrame } from './grade-verdict.js';

let seq = 0;
const rec = (k: string, fields: Record<string, unknown>): RunRecord => ({ k, s: seq++, ...fields });
/** The records of one test: its item, its three phases, and the plugin's call record. */
function test(
  id: string,
  call: 'passed' | 'failed' | 'skipped',
  opts: { returned?: boolean; xfail?: boolean; key?: string; fn?: boolean } = {},
) {
  const out = [
    rec('item', { id, key: opts.key ?? id, fn: opts.fn ?? true }),
    rec('phase', { id, when: 'setup', outcome: 'passed', xfail: false }),
  ];
  if (call !== 'skipped' || opts.returned !== undefined)
    out.push(rec('call', { id, returned: opts.returned ?? call === 'passed', exc: null }));
  out.push(rec('phase', { id, when: 'call', outcome: call, xfail: opts.xfail ?? false }));
  out.push(rec('phase', { id, when: 'teardown', outcome: 'passed', xfail: false }));
  return out;
}
function frame(records: RunRecord[], extra: Partial<RunFrame> = {}): RunFrame {
  return {
    v: 1,
    exit: { code: 1 },
    records: [...records, rec('end', { exitstatus: 1 })],
    evidence: [],
    overflow: false,
    canaries: [],
    plantNotes: [],
    log: '',
    logBytes: 0,
    ...extra,
  };
}
const kinds = (f: { flags: Array<{ kind: string }> }) => f.flags.map((x) => x.kind);

describe('judgeFrame', () => {
  it('passes a test only when pytest and the call agree', () => {
    const v = judgeFrame(
      frame([
        ...test('t.py::ok', 'passed'),
        ...test('t.py::forced', 'passed', { returned: false }),
        ...test('t.py::bad', 'failed'),
        ...test('t.py::unittest', 'passed', { fn: false }),
      ]),
      ['t.py::ok', 't.py::forced', 't.py::bad', 't.py::unittest', 't.py::gone'],
      false,
    );
    expect(v.statusMap).toEqual({
      't.py::ok': 'PASSED',
      't.py::forced': 'FAILED',
      't.py::bad': 'FAILED',
      't.py::unittest': 'PASSED',
    });
    expect(kinds(v)).toEqual(['tampered']);
    expect(v.flags[0]!.detail).toMatch(/forced was reported passed but its test function raised/);
  });

  it('names skips, xfails and xpasses as they are', () => {
    const v = judgeFrame(
      frame([
        ...test('t.py::s', 'skipped'),
        ...test('t.py::xf', 'skipped', { xfail: true }),
        ...test('t.py::xp', 'passed', { xfail: true }),
      ]),
      ['t.py::s', 't.py::xf', 't.py::xp'],
      false,
    );
    expect(v.statusMap).toEqual({ 't.py::s': 'SKIPPED', 't.py::xf': 'XFAIL', 't.py::xp': 'XPASS' });
  });

  it('matches the ids a log parser cut at whitespace, all of them passing to pass', () => {
    const v = judgeFrame(
      frame([
        ...test('t.py::p[a b]', 'passed', { key: 't.py::p[a' }),
        ...test('t.py::p[a c]', 'failed', { key: 't.py::p[a' }),
        ...test('t.py::q[x y]', 'passed', { key: 't.py::q[x' }),
      ]),
      ['t.py::p[a', 't.py::q[x', 't.py::q['],
      true,
    );
    expect(v.statusMap).toEqual({ 't.py::p[a': 'FAILED', 't.py::q[x': 'PASSED', 't.py::q[': 'PASSED' });
    expect(
      judgeFrame(frame(test('t.py::q[x y]', 'passed', { key: 't.py::q[x' })), ['t.py::q['], false).statusMap,
    ).toEqual({});
  });

  it('calls duplicate reports, forged records and a second end tampering', () => {
    const records = [
      ...test('t.py::a', 'passed'),
      rec('phase', { id: 't.py::a', when: 'call', outcome: 'passed', xfail: false }),
      rec('end', { exitstatus: 0 }),
    ];
    const v = judgeFrame(
      frame(records, { evidence: ['a record on the report channel that the grader did not write'] }),
      ['t.py::a'],
      false,
    );
    expect(v.flags.map((f) => f.detail)).toEqual([
      'a record on the report channel that the grader did not write',
      'two call reports for t.py::a',
      'two session ends',
    ]);
  });

  it('judges canaries: must fail, must pass, mutants; missing ones only excused when nothing ran or the module did not collect', () => {
    const canaries = [
      { id: 't.py::test_fail', expect: 'fail' as const, kind: 'fail' },
      { id: 't.py::test_pass', expect: 'pass' as const, kind: 'pass' },
      { id: 't.py::test_mutant', expect: 'not_pass' as const, kind: 'mutant', of: 't.py::a' },
      { id: 'u.py::test_gone', expect: 'fail' as const, kind: 'raise' },
    ];
    const ran = [
      ...test('t.py::a', 'passed'),
      ...test('t.py::test_fail', 'passed'),
      ...test('t.py::test_pass', 'passed'),
      ...test('t.py::test_mutant[1]', 'failed'),
    ];
    const v = judgeFrame(frame(ran, { canaries }), ['t.py::a'], false);
    expect(v.canaries.map((c) => [c.id, c.ok, c.seen])).toEqual([
      ['t.py::test_fail', false, ['PASSED']],
      ['t.py::test_pass', true, ['PASSED']],
      ['t.py::test_mutant', true, ['FAILED']],
      ['u.py::test_gone', false, []],
    ]);
    expect(kinds(v)).toEqual(['tampered', 'tampered']);
    const collectFailed = judgeFrame(
      frame([...ran, rec('collect', { id: 'u.py' })], { canaries }),
      [],
      false,
    );
    expect(collectFailed.canaries.at(-1)).toMatchObject({ ok: true, excused: 'u.py did not collect' });
    const nothingRan = judgeFrame(frame([], { canaries }), [], false);
    expect(nothingRan.canaries.every((c) => c.ok && c.excused === 'no test ran')).toBe(true);
  });

  it('takes the last attempt of a test pytest-rerunfailures ran again', () => {
    const first = test('t.py::flaky', 'failed');
    const rerun = rec('rerun', { id: 't.py::flaky' });
    const v = judgeFrame(
      frame([...first.slice(0, 3), rerun, ...first.slice(4), ...test('t.py::flaky', 'passed').slice(1)]),
      ['t.py::flaky'],
      false,
    );
    expect(v).toMatchObject({ statusMap: { 't.py::flaky': 'PASSED' }, flags: [] });
  });

  it('checks the process exit code against the session, and a run without its end is incomplete', () => {
    const ok = judgeFrame(frame(test('t.py::a', 'passed')), ['t.py::a'], false);
    expect(ok.flags).toEqual([]);
    const forged = judgeFrame(frame(test('t.py::a', 'passed'), { exit: { code: 0 } }), ['t.py::a'], false);
    expect(kinds(forged)).toEqual(['exit_code_mismatch']);
    const killed = judgeFrame(frame(test('t.py::a', 'passed'), { exit: { signal: 11 } }), ['t.py::a'], false);
    expect(killed.flags).toEqual([]);
    const cut = judgeFrame(
      { ...frame(test('t.py::a', 'passed')), records: test('t.py::a', 'passed') },
      ['t.py::a'],
      false,
    );
    expect(cut.exitstatus).toBeUndefined();
  });
});

describe('gradingStatusMap: only a pass passes', () => {
  const map = { f: 'SKIPPED', g: 'XFAIL', h: 'XPASS', i: 'ERROR', p: 'SKIPPED', q: 'PASSED' };
  it('under swesmith, every other outcome is a failure', () => {
    expect(gradingStatusMap(map, ['p', 'q'], 'swesmith')).toEqual({
      f: 'FAILED',
      g: 'FAILED',
      h: 'FAILED',
      i: 'FAILED',
      p: 'FAILED',
      q: 'PASSED',
    });
  });
  it('under strict, a skipped P2P test is maintained (SWE-bench main), a skipped F2P test is not', () => {
    expect(gradingStatusMap(map, ['p', 'q'], 'strict')).toEqual({
      f: 'FAILED',
      g: 'FAILED',
      h: 'FAILED',
      i: 'FAILED',
      p: 'SKIPPED',
      q: 'PASSED',
    });
  });
});
