/**
 * Parsers beyond the golden vectors: the runner formats SWE-smith's other language profiles read (Go,
 * cargo, Jest, Mocha, unittest), Python's string semantics, and the dispatcher's errors.
 */
import { describe, expect, it } from 'vitest';
import { parseTestLog } from './parsers/index.js';
import { pySplit, pyStrip } from './parsers/python-text.js';
import { resolveProfile } from './profiles.js';

describe('go test -v', () => {
  it('reads PASS/FAIL/SKIP lines, subtests and failing packages', () => {
    const log = [
      '=== RUN   TestAdd',
      '--- PASS: TestAdd (0.00s)',
      '=== RUN   TestDiv',
      '=== RUN   TestDiv/by_zero',
      '    --- FAIL: TestDiv/by_zero (0.00s)',
      '--- FAIL: TestDiv (0.00s)',
      '--- SKIP: TestSlow (0.00s)',
      'FAIL\tgithub.com/x/calc\t0.004s',
      'ok  \tgithub.com/x/other\t0.002s',
    ].join('\n');
    expect({ ...parseTestLog(log, { parser: 'go_test' }) }).toEqual({
      TestAdd: 'PASSED',
      'TestDiv/by_zero': 'FAILED',
      TestDiv: 'FAILED',
      TestSlow: 'SKIPPED',
      'github.com/x/calc': 'FAILED',
    });
  });
});

describe('cargo test', () => {
  it('reads ok/FAILED and ignores ignored tests', () => {
    const log = [
      'running 4 tests',
      'test tests::adds ... ok',
      'test tests::divides ... FAILED',
      'test tests::slow ... ignored',
      'test parse::handles_unicode_ünï ... ok',
      'test tests::timed ... ok (0.2s)',
      '',
      'test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out',
    ].join('\n');
    expect({ ...parseTestLog(log, { parser: 'cargo' }) }).toEqual({
      'tests::adds': 'PASSED',
      'tests::divides': 'FAILED',
      'parse::handles_unicode_ünï': 'PASSED',
      'tests::timed': 'PASSED',
    });
  });
});

describe('jest --verbose', () => {
  it('reads ✓ ✕ ○ with durations stripped', () => {
    const log = [
      ' PASS  src/sum.test.js',
      '  sum',
      '    ✓ adds 1 + 2 to equal 3 (3 ms)',
      '    ✕ subtracts (12 ms)',
      '    ○ skipped todo later',
      '    ✓ handles zero',
    ].join('\n');
    expect({ ...parseTestLog(log, { parser: 'jest' }) }).toEqual({
      'adds 1 + 2 to equal 3': 'PASSED',
      subtracts: 'FAILED',
      'skipped todo later': 'SKIPPED',
      'handles zero': 'PASSED',
    });
  });
});

describe('mocha (SWE-smith parse_log_mocha)', () => {
  it('reads ✔ ✖ and - with durations stripped; other marks are not its format', () => {
    const log = [
      '  Array',
      '    ✔ returns -1 when absent',
      '    ✔ returns the index (5ms)',
      '    - is pending',
      '    ✖ throws on bad input',
      '    ✓ a jest mark',
      '  1) Array throws on bad input:',
    ].join('\n');
    expect({ ...parseTestLog(log, { parser: 'mocha' }) }).toEqual({
      'returns -1 when absent': 'PASSED',
      'returns the index': 'PASSED',
      'is pending': 'SKIPPED',
      'throws on bad input': 'FAILED',
    });
  });
});

describe('vitest --reporter verbose (SWE-smith parse_log_vitest)', () => {
  it('reads ✓ ✗ ○ lines, durations stripped', () => {
    const log = [
      ' ✓ src/a.test.ts > adds (3ms)',
      ' ✗ src/a.test.ts > divides',
      ' ○ src/a.test.ts > later',
      ' ❯ src/b.test.ts (2)',
    ].join('\n');
    expect({ ...parseTestLog(log, { parser: 'vitest' }) }).toEqual({
      'src/a.test.ts > adds': 'PASSED',
      'src/a.test.ts > divides': 'FAILED',
      'src/a.test.ts > later': 'SKIPPED',
    });
  });
});

describe('python -m unittest -v', () => {
  it('reads every outcome, keeping the name as printed', () => {
    const log = [
      'test_a (pkg.tests.T.test_a) ... ok',
      'test_b (pkg.tests.T.test_b) ... FAIL',
      'test_c (pkg.tests.T.test_c) ... ERROR',
      "test_d (pkg.tests.T.test_d) ... skipped 'later'",
      'test_e (pkg.tests.T.test_e) ... expected failure',
      'test_f (pkg.tests.T.test_f) ... unexpected success',
    ].join('\n');
    expect({ ...parseTestLog(log, { parser: 'unittest' }) }).toEqual({
      'test_a (pkg.tests.T.test_a)': 'PASSED',
      'test_b (pkg.tests.T.test_b)': 'FAILED',
      'test_c (pkg.tests.T.test_c)': 'ERROR',
      'test_d (pkg.tests.T.test_d)': 'SKIPPED',
      'test_e (pkg.tests.T.test_e)': 'XFAIL',
      'test_f (pkg.tests.T.test_f)': 'FAILED',
    });
  });
});

describe('Python string semantics', () => {
  it("splits and strips on Python's whitespace, not JavaScript's", () => {
    // \x1c-\x1f and \x85 are whitespace to Python; \ufeff is whitespace to JavaScript only.
    expect(pySplit('a\x1cb\x85c\ufeffd  e')).toEqual(['a', 'b', 'c\ufeffd', 'e']);
    expect(pyStrip('\x1f x \x85')).toBe('x');
  });

  it('keeps a \\r inside an id, as Python does when it splits on \\n only', () => {
    const map = parseTestLog('PASSED tests/t.py::a\r\nPASSED tests/t.py::b\n', { parser: 'pytest' });
    // `\r` is whitespace for str.split(), so the id itself is clean.
    expect({ ...map }).toEqual({ 'tests/t.py::a': 'PASSED', 'tests/t.py::b': 'PASSED' });
  });

  it('records a test named __proto__ like any other', () => {
    const map = parseTestLog('__proto__ PASSED\n', { parser: 'swesmith:swesmith/mewwts__addict.75284f95' });
    expect(Object.keys(map)).toEqual(['__proto__']);
  });
});

describe('parse_log_pytest_v2 old-style lines (`id STATUS`, no -rA summary)', () => {
  it('v4.1.0 keeps the first two tokens, main joins all but the status', () => {
    const log = 'tests/t.py::test_space[a b] PASSED\ntests/t.py::test_ok PASSED\n';
    expect({ ...parseTestLog(log, { parser: 'pytest_v2', ref: 'v4.1.0' }) }).toEqual({
      'tests/t.py::test_space[a': 'b]',
      'tests/t.py::test_ok': 'PASSED',
    });
    expect({ ...parseTestLog(log, { parser: 'pytest_v2', ref: 'main' }) }).toEqual({
      'tests/t.py::test_space[a b]': 'PASSED',
      'tests/t.py::test_ok': 'PASSED',
    });
  });
});

describe('dispatch', () => {
  it('names the valid parsers when given an unknown one', () => {
    expect(() => parseTestLog('', { parser: 'nose' as never })).toThrow(
      /unknown parser "nose".*pytest_v2.*swesmith:<mirror>/,
    );
  });

  it('rejects an unknown ref', () => {
    expect(() => parseTestLog('', { parser: 'pytest', ref: 'v3' as never })).toThrow(
      /ref must be "v4.1.0" or "main"/,
    );
  });

  it('uses the default Python profile for mirrors without an override, matched without the commit', () => {
    expect(resolveProfile('swesmith/unknown__repo.12345678').key).toBe('*');
    expect(resolveProfile('swesmith/paramiko__paramiko.deadbeef').key).toBe('paramiko__paramiko');
  });

  it("knows SWE-smith's Go and Rust repositories", () => {
    expect(resolveProfile('swesmith/gin-gonic__gin.3c12d2a8')).toMatchObject({
      language: 'go',
      testCommand: 'go test -v ./...',
    });
    expect(resolveProfile('swesmith/tokio-rs__tokio.ab3ff69c')).toMatchObject({
      language: 'rust',
      testCommand: 'cargo test --verbose --features full -- --skip try_exists',
    });
    expect(resolveProfile('swesmith/dtolnay__anyhow.1d7ef1db').testCommand).toBe('cargo test --verbose');
  });
});
