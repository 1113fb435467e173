/**
 * SWE-smith's profile log parsers (`swesmith/profiles/*.py`): the default Python profile reads pytest's
 * verbose progress lines; a few repositories override it. Other language families follow the documented
 * formats of their runners (Go `go test -v`, `cargo test`, Jest, Mocha).
 */
import { beforeLast, NS, PY_WS, pySplit, pySplitLines, pyStrip, S } from './python-text.js';
import { newStatusMap, record, type StatusMap, TEST_STATUSES } from './types.js';

const pythonDefault = TEST_STATUSES.map((status) => ({
  status,
  re: new RegExp(`^(${NS}+)(${S}+)${status}`, 'u'),
}));

/** `PythonProfile.log_parser`: `^(\S+)(\s+)STATUS` per line, for each status in enum order. */
export function parsePythonProfile(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    for (const { status, re } of pythonDefault) {
      if (!line.includes(status)) continue;
      const m = re.exec(line);
      if (m) record(map, m[1]!, status);
    }
  }
  return map;
}

const paramiko = TEST_STATUSES.map((status) => ({ status, re: new RegExp(`^${status}${S}(${NS}+)`, 'u') }));

/** Paramiko: reads the `-rA` summary (`^STATUS\s(\S+)`). */
export function parseParamiko(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    for (const { status, re } of paramiko) {
      const m = re.exec(line);
      if (m) record(map, m[1]!, status);
    }
  }
  return map;
}

const autograd = TEST_STATUSES.map((status) => ({
  status,
  re: new RegExp(`^\\[gw\\p{Nd}\\]${S}${status}${S}(${NS}+)`, 'u'),
}));

/** Autograd: xdist lines with `-o console_output_style=classic` (`^[gwN] STATUS id`). */
export function parseAutograd(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    for (const { status, re } of autograd) {
      const m = re.exec(line);
      if (m) record(map, m[1]!, status);
    }
  }
  return map;
}

/** Tornado (unittest runner): `... ok`, `... skipped `, and `ERROR:`/`FAIL:` headers (both FAILED). */
export function parseTornado(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    if (line.endsWith('... ok')) record(map, line.split(' ... ')[0]!, 'PASSED');
    else if (line.includes(' ... skipped ')) record(map, line.split(' ... ')[0]!, 'SKIPPED');
    else if (line.startsWith('ERROR:') || line.startsWith('FAIL:'))
      record(map, pySplit(line).slice(1, 3).join(' '), 'FAILED');
  }
  return map;
}

const slugify = new RegExp(`^([a-zA-Z0-9_\\-,\\.${PY_WS}\\(\\)']+)${S}\\.{3}${S}(ok|FAIL|ERROR)$`, 'u');
const slugifyStatus = { ok: 'PASSED', FAIL: 'FAILED', ERROR: 'ERROR' } as const;

/** python-slugify (`python test.py --verbose`): unittest lines whose names use a restricted alphabet. */
export function parseSlugify(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    const m = slugify.exec(line);
    if (m) record(map, m[1]!, slugifyStatus[m[2] as keyof typeof slugifyStatus]);
  }
  return map;
}

/** python/mypy: `PASSED` or `FAILED` anywhere in a line names the line's last token. */
export function parseMypy(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    for (const status of ['PASSED', 'FAILED'] as const) {
      if (line.includes(status)) {
        const last = pySplit(line).at(-1);
        if (last !== undefined) record(map, last, status);
        break;
      }
    }
  }
  return map;
}

/** Plain `python -m unittest -v` output (`name (module.Class.name) ... ok|FAIL|ERROR|skipped`). */
export function parseUnittest(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    const at = line.lastIndexOf(' ... ');
    if (at < 0) continue;
    const name = line.slice(0, at).trim();
    const outcome = line.slice(at + 5).trim();
    if (outcome === 'ok') record(map, name, 'PASSED');
    else if (outcome === 'FAIL') record(map, name, 'FAILED');
    else if (outcome === 'ERROR') record(map, name, 'ERROR');
    else if (outcome.startsWith('skipped')) record(map, name, 'SKIPPED');
    else if (outcome === 'expected failure') record(map, name, 'XFAIL');
    else if (outcome === 'unexpected success') record(map, name, 'FAILED');
  }
  return map;
}

const goPatterns = [
  { re: new RegExp(`^--- PASS: (${NS}+)`, 'u'), status: 'PASSED' },
  { re: new RegExp(`^--- FAIL: (${NS}+)`, 'u'), status: 'FAILED' },
  { re: new RegExp(`^FAIL:?${S}?([^\\n]+?)${S}`, 'u'), status: 'FAILED' },
  { re: new RegExp(`^--- SKIP: (${NS}+)`, 'u'), status: 'SKIPPED' },
] as const;

/** `go test -v` (SWE-smith `GoProfile`): `re.match` (anchored) of each pattern on the stripped line. */
export function parseGoTest(log: string): StatusMap {
  const map = newStatusMap();
  for (const raw of log.split('\n')) {
    const line = pyStrip(raw);
    for (const { re, status } of goPatterns) {
      const m = re.exec(line);
      if (m) record(map, m[1]!, status);
    }
  }
  return map;
}

/** `cargo test` (SWE-smith `RustProfile`): `... ok` / `... FAILED` anywhere; the name is before the last ` ... `. */
export function parseCargo(log: string): StatusMap {
  const map = newStatusMap();
  for (const raw of pySplitLines(log)) {
    const line = raw.startsWith('test ') ? raw.slice(5) : raw;
    if (line.includes('... ok')) record(map, pyStrip(beforeLast(line, ' ... ')), 'PASSED');
    else if (line.includes('... FAILED')) record(map, pyStrip(beforeLast(line, ' ... ')), 'FAILED');
  }
  return map;
}

const duration = `(?:${S}\\((\\p{Nd}+${S}*m?s)\\))?$`;
const jestLine = new RegExp(`^${S}*(✓|✕|○)${S}([^\\n]+?)${duration}`, 'u');
const jestStatus = { '✓': 'PASSED', '✕': 'FAILED', '○': 'SKIPPED' } as const;

/** Jest `--verbose` (SWE-smith `parse_log_jest`): `✓` pass, `✕` fail, `○` skipped, on stripped lines. */
export function parseJest(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    const m = jestLine.exec(pyStrip(line));
    if (m) record(map, m[2]!, jestStatus[m[1] as keyof typeof jestStatus]);
  }
  return map;
}

const mochaLine = new RegExp(`^${S}*(✔|✖|-)${S}([^\\n]+?)${duration}`, 'u');
const mochaStatus = { '✔': 'PASSED', '✖': 'FAILED', '-': 'SKIPPED' } as const;

/** Mocha (SWE-smith `parse_log_mocha`): `✔` pass, `✖` fail, `-` pending, on stripped lines. */
export function parseMocha(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    const m = mochaLine.exec(pyStrip(line));
    if (m) record(map, m[2]!, mochaStatus[m[1] as keyof typeof mochaStatus]);
  }
  return map;
}

const vitestPatterns = ['✓', '✗', '○'] as const;
const vitestStatus = { '✓': 'PASSED', '✗': 'FAILED', '○': 'SKIPPED' } as const;
const vitestRules = [
  ...vitestPatterns.map((m) => ({
    re: new RegExp(`^${m}${S}+([^\\n]+?)(?:${S}+\\([.\\p{Nd}]+ms\\))?$`, 'u'),
    status: vitestStatus[m],
  })),
  ...vitestPatterns.map((m) => ({ re: new RegExp(`^${m}${S}+([^\\n]+?)$`, 'u'), status: vitestStatus[m] })),
];

/** Vitest `--reporter verbose` (SWE-smith `parse_log_vitest`): first matching rule per stripped line. */
export function parseVitest(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    const stripped = pyStrip(line);
    for (const { re, status } of vitestRules) {
      const m = re.exec(stripped);
      if (m) {
        record(map, pyStrip(m[1]!), status);
        break;
      }
    }
  }
  return map;
}
