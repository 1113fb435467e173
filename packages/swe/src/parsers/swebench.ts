/**
 * SWE-bench's Python log parsers (`swebench/harness/log_parsers/python.py`) at v4.1.0 and at main,
 * reproduced line for line, quirks included: ids cut at the first space, ` - ` removed from FAILED
 * lines, `SKIPPED [1]` keys (v4.1.0), later lines overwriting earlier ones.
 */
import { beforeFirst, beforeLast, pyLstrip, pySplit, pyStrip, replaceAll, S } from './python-text.js';
import { newStatusMap, record, type StatusMap, type SwebenchRef, TEST_STATUSES } from './types.js';

function startsWithStatus(line: string): boolean {
  for (const s of TEST_STATUSES) if (line.startsWith(s)) return true;
  return false;
}

function endsWithStatus(line: string): boolean {
  for (const s of TEST_STATUSES) if (line.endsWith(s)) return true;
  return false;
}

const skipCount = /^\[\d+\]$/;

/** The shared `-rA` summary rule: a line starting with a status names the test in its second token. */
function summaryLine(line: string, ref: SwebenchRef, map: StatusMap): void {
  let text = line;
  if (text.startsWith('FAILED')) text = replaceAll(text, ' - ', ' ');
  const tokens = pySplit(text, 2);
  if (tokens.length <= 1) return;
  const [status, id] = tokens as [string, string];
  // main skips the `SKIPPED [N] file:line: reason` summary lines v4.1.0 records under the key `[N]`.
  if (ref === 'main' && status === 'SKIPPED' && skipCount.test(id)) return;
  record(map, id, status);
}

export function parsePytest(log: string, ref: SwebenchRef): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) if (startsWithStatus(line)) summaryLine(line, ref, map);
  return map;
}

const optionPattern = /(.*?)\[(.*)\]/su;

export function parsePytestOptions(log: string, ref: SwebenchRef): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    if (!startsWithStatus(line)) continue;
    const one = newStatusMap();
    summaryLine(line, ref, one);
    for (const [id, status] of Object.entries(one)) {
      const m = optionPattern.exec(id);
      if (!m) {
        record(map, id, status);
        continue;
      }
      let option = m[2]!;
      if (option.startsWith('/') && !option.startsWith('//') && !option.includes('*')) {
        option = `/${option.split('/').at(-1)}`;
      }
      record(map, `${m[1]}[${option}]`, status);
    }
  }
  return map;
}

const ansiCode = /\[(\p{Nd}+)m/gu;
const controlChars = /[\x01-\x1f]/g;

export function parsePytestV2(log: string, ref: SwebenchRef): StatusMap {
  const map = newStatusMap();
  for (const raw of log.split('\n')) {
    const line = raw.replace(ansiCode, '').replace(controlChars, '');
    if (startsWithStatus(line)) {
      if (ref === 'v4.1.0') {
        summaryLine(line, ref, map);
        continue;
      }
      // main keeps every token after the status (ids with spaces survive) and cuts FAILED at ` - `.
      const text = line.startsWith('FAILED') ? beforeFirst(line, ' - ') : line;
      const tokens = pySplit(text);
      if (tokens.length <= 1) continue;
      if (tokens[0] === 'SKIPPED' && skipCount.test(tokens[1]!)) continue;
      record(map, tokens.slice(1).join(' '), tokens[0]!);
    } else if (endsWithStatus(line)) {
      // Old-style `path::test STATUS`. v4.1.0 takes the first two tokens, so an id with a space records its
      // second word as the "status" (`test_space[a b] PASSED` → `test_space[a`: `b]`).
      const tokens = pySplit(line);
      if (tokens.length <= 1) continue;
      if (ref === 'v4.1.0') record(map, tokens[0]!, tokens[1]!);
      else record(map, tokens.slice(0, -1).join(' '), tokens.at(-1)!);
    }
  }
  return map;
}

export function parseMatplotlib(log: string, ref: SwebenchRef): StatusMap {
  const map = newStatusMap();
  for (const raw of log.split('\n')) {
    const line = replaceAll(replaceAll(raw, 'MouseButton.LEFT', '1'), 'MouseButton.RIGHT', '3');
    if (startsWithStatus(line)) summaryLine(line, ref, map);
  }
  return map;
}

export function parseSeaborn(log: string): StatusMap {
  const map = newStatusMap();
  for (const line of log.split('\n')) {
    if (line.startsWith('FAILED')) {
      const id = pySplit(line)[1];
      if (id === undefined) throw new IndexError('parse_log_seaborn', line);
      record(map, id, 'FAILED');
    } else if (line.includes(' PASSED ')) {
      const parts = pySplit(line);
      if (parts[1] === 'PASSED') record(map, parts[0]!, 'PASSED');
    } else if (line.startsWith('PASSED')) {
      const id = pySplit(line)[1];
      if (id === undefined) throw new IndexError('parse_log_seaborn', line);
      record(map, id, 'PASSED');
    }
  }
  return map;
}

/** Upstream raises `IndexError` on some malformed lines; the caller turns this into an infra error. */
export class IndexError extends Error {
  constructor(parser: string, line: string) {
    super(`${parser}: upstream raises IndexError on the line ${JSON.stringify(line.slice(0, 200))}`);
  }
}

const djangoPass = [' ... ok', ' ... OK', ' ...  OK'] as const;
// Python's MULTILINE `^`/`$` break only at `\n` and its `.` excludes only `\n` (JavaScript's also stop at
// `\r`, `\u2028`, `\u2029`), hence the explicit lookarounds and `[^\n]`.
const djangoPatterns = [
  `(?<=^|\n)([^\n]*?)${S}\\.\\.\\.${S}Testing against Django installed in ([\\s\\S]*?) silenced\\)\\.\\nok(?=\n|$)`,
  `(?<=^|\n)([^\n]*?)${S}\\.\\.\\.${S}Internal Server Error: \\/([^\n]*)\\/\\nok(?=\n|$)`,
  `(?<=^|\n)([^\n]*?)${S}\\.\\.\\.${S}System check identified no issues \\(0 silenced\\)\\nok(?=\n|$)`,
].map((source) => new RegExp(source, 'gu'));

export function parseDjango(log: string): StatusMap {
  const map = newStatusMap();
  let prevTest: string | undefined;
  for (const raw of log.split('\n')) {
    let line = pyStrip(raw);
    if (line.includes('--version is equivalent to version'))
      record(map, '--version is equivalent to version', 'PASSED');
    if (line.includes(' ... ')) prevTest = beforeFirst(line, ' ... ');
    for (const suffix of djangoPass) {
      if (line.endsWith(suffix)) {
        if (line.startsWith('Applying sites.0002_alter_domain_unique...test_no_migrations')) {
          line = pyStrip(line.slice(line.indexOf('...') + 3));
        }
        record(map, beforeLast(line, suffix), 'PASSED');
        break;
      }
    }
    if (line.includes(' ... skipped')) record(map, beforeFirst(line, ' ... skipped'), 'SKIPPED');
    if (line.endsWith(' ... FAIL')) record(map, beforeFirst(line, ' ... FAIL'), 'FAILED');
    if (line.startsWith('FAIL:'))
      record(map, pyStrip(pySplit(line)[1] ?? throwIndex('parse_log_django', line)), 'FAILED');
    if (line.endsWith(' ... ERROR')) record(map, beforeFirst(line, ' ... ERROR'), 'ERROR');
    if (line.startsWith('ERROR:'))
      record(map, pyStrip(pySplit(line)[1] ?? throwIndex('parse_log_django', line)), 'ERROR');
    if (pyLstrip(line).startsWith('ok') && prevTest !== undefined) record(map, prevTest, 'PASSED');
  }
  for (const pattern of djangoPatterns) {
    for (const m of log.matchAll(pattern)) record(map, m[1]!, 'PASSED');
  }
  return map;
}

function throwIndex(parser: string, line: string): never {
  throw new IndexError(parser, line);
}

const sympyFailure = /(_*) ([^\n]*)\.py:([^\n]*) (_*)/g;

export function parseSympy(log: string): StatusMap {
  const map = newStatusMap();
  for (const m of log.matchAll(sympyFailure)) record(map, `${m[2]}.py:${m[3]}`, 'FAILED');
  for (const raw of log.split('\n')) {
    const line = pyStrip(raw);
    if (!line.startsWith('test_')) continue;
    if (line.endsWith(' E')) record(map, pySplit(line)[0]!, 'ERROR');
    if (line.endsWith(' F')) record(map, pySplit(line)[0]!, 'FAILED');
    if (line.endsWith(' ok')) record(map, pySplit(line)[0]!, 'PASSED');
  }
  return map;
}
