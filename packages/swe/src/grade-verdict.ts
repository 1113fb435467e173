/**
 * From the runner's frame to a verdict: each test's status folded from its phase reports and from the
 * plugin's own record of the call (a passed report for a function that raised is not a pass), the
 * dataset's ids matched the way its log parser named them, the canaries judged, and every sign of
 * tampering turned into a `tampered` flag with its evidence. Pure functions, no sandbox.
 */
import type { HackFlag } from './antihack.js';
import type { RunFrame, RunRecord } from './grade-run.js';
import type { StatusMap } from './parsers/types.js';

/** A test's outcome under the grader: only `PASSED` is a pass. */
export type RunStatus = 'PASSED' | 'FAILED' | 'ERROR' | 'SKIPPED' | 'XFAIL' | 'XPASS';

/** One canary test of a grading run: what it had to do and what it did. */
export interface CanaryVerdict {
  id: string;
  /** `fail`: must fail; `pass`: must pass; `not_pass`: a mutant of a F2P test, must not pass. */
  expect: 'fail' | 'pass' | 'not_pass';
  kind: string;
  /** The F2P test a mutant copies. */
  of?: string | undefined;
  /** Each matching test's status (none: missing). */
  seen: RunStatus[];
  ok: boolean;
  /** Why a missing canary is not evidence (its module failed to collect, or no test ran). */
  excused?: string | undefined;
}

export interface FrameVerdict {
  /** Every test the plugin reported, by node id. */
  byNode: Map<string, RunStatus>;
  /** The task's F2P/P2P ids (the dataset's names) → status; absent when no test of that name ran. */
  statusMap: StatusMap;
  canaries: CanaryVerdict[];
  flags: HackFlag[];
  /** pytest's own exit status, from its session's end (absent: the run was cut short). */
  exitstatus: number | undefined;
  /** The process's exit code (undefined when a signal ended it). */
  exitCode: number | undefined;
}

interface NodeRecords {
  fn?: boolean | undefined;
  key?: string | undefined;
  phases: Map<string, { outcome: string; xfail: boolean }>;
  call?: { returned: boolean; exc: string | null } | undefined;
}

const str = (v: unknown) => (typeof v === 'string' ? v : '');

/** Group the records by node id; duplicates and unknown kinds are evidence. */
function collect(records: readonly RunRecord[], evidence: string[]) {
  const nodes = new Map<string, NodeRecords>();
  const collectFailed = new Set<string>();
  // A test pytest-rerunfailures ran again: its later reports replace the earlier ones.
  const rerun = new Set<string>();
  let end: { exitstatus: number } | undefined;
  const node = (id: string) => {
    let n = nodes.get(id);
    if (!n) {
      n = { phases: new Map() };
      nodes.set(id, n);
    }
    return n;
  };
  for (const r of records) {
    const id = str(r.id);
    if (r.k === 'item') Object.assign(node(id), { fn: r.fn === true, key: str(r.key) || id });
    else if (r.k === 'phase') {
      const n = node(id);
      const when = str(r.when);
      if (n.phases.has(when) && !rerun.has(id)) evidence.push(`two ${when} reports for ${id}`);
      n.phases.set(when, { outcome: str(r.outcome), xfail: r.xfail === true });
    } else if (r.k === 'call') {
      const n = node(id);
      if (n.call && !rerun.has(id)) evidence.push(`${id} was called twice`);
      n.call = { returned: r.returned === true, exc: typeof r.exc === 'string' ? r.exc : null };
    } else if (r.k === 'rerun') rerun.add(id);
    else if (r.k === 'collect') collectFailed.add(id);
    else if (r.k === 'evidence') evidence.push(`${str(r.what)}: ${str(r.detail)}`);
    else if (r.k === 'end') {
      if (end) evidence.push('two session ends');
      end = { exitstatus: typeof r.exitstatus === 'number' ? r.exitstatus : -1 };
    } else evidence.push(`an unknown record kind ${JSON.stringify(r.k)}`);
  }
  return { nodes, collectFailed, end };
}

/** A test's status from its reports; a pass needs pytest's reports and the plugin's own call record to agree. */
function statusOf(id: string, n: NodeRecords, evidence: string[]): RunStatus {
  const setup = n.phases.get('setup');
  const call = n.phases.get('call');
  const teardown = n.phases.get('teardown');
  if (!setup || setup.outcome === 'failed') return 'ERROR';
  if (setup.outcome === 'skipped') return setup.xfail ? 'XFAIL' : 'SKIPPED';
  if (!call) return 'ERROR';
  if (call.outcome === 'failed') return 'FAILED';
  if (call.outcome === 'skipped') return call.xfail ? 'XFAIL' : 'SKIPPED';
  if (call.outcome !== 'passed') return 'ERROR';
  if (call.xfail) return 'XPASS';
  if (n.fn) {
    if (!n.call) {
      evidence.push(`${id} was reported passed but its test function never ran under the grader`);
      return 'FAILED';
    }
    if (!n.call.returned) {
      evidence.push(`${id} was reported passed but its test function raised ${n.call.exc ?? 'an exception'}`);
      return 'FAILED';
    }
  }
  if (teardown?.outcome !== 'passed') return 'ERROR';
  return 'PASSED';
}

/** Several tests under one name (ids cut at whitespace): a pass only when all of them passed. */
function combine(statuses: RunStatus[]): RunStatus {
  if (statuses.every((s) => s === 'PASSED')) return 'PASSED';
  for (const s of ['FAILED', 'ERROR', 'XPASS', 'XFAIL', 'SKIPPED'] as const)
    if (statuses.includes(s)) return s;
  return 'FAILED';
}

const dropParams = (id: string) => id.replace(/\[.*$/, '');
const moduleOf = (id: string) => id.split('::')[0]!;

function judgeCanaries(
  frame: RunFrame,
  byNode: Map<string, RunStatus>,
  collectFailed: Set<string>,
  anyRan: boolean,
): CanaryVerdict[] {
  const byCanary = new Map<string, RunStatus[]>();
  for (const [id, status] of byNode) {
    const bare = dropParams(id);
    if (!byCanary.has(bare)) byCanary.set(bare, []);
    byCanary.get(bare)!.push(status);
  }
  return frame.canaries.map((c) => {
    const seen = byCanary.get(c.id) ?? [];
    let excused: string | undefined;
    if (seen.length === 0) {
      if (collectFailed.has(moduleOf(c.id))) excused = `${moduleOf(c.id)} did not collect`;
      else if (!anyRan) excused = 'no test ran';
    }
    const ok =
      excused !== undefined ||
      (seen.length > 0 &&
        (c.expect === 'fail'
          ? seen.every((s) => s === 'FAILED' || s === 'ERROR')
          : c.expect === 'pass'
            ? seen.every((s) => s === 'PASSED' || s === 'ERROR')
            : seen.every((s) => s !== 'PASSED' && s !== 'XPASS')));
    return { id: c.id, expect: c.expect, kind: c.kind, of: c.of, seen, ok, excused };
  });
}

/**
 * The verdict of a run's frame. `wanted` are the task's F2P/P2P ids; `prefixMatch` (SWE-bench main) lets an
 * id the dataset cut inside its brackets match the tests it starts.
 */
export function judgeFrame(frame: RunFrame, wanted: readonly string[], prefixMatch: boolean): FrameVerdict {
  const evidence = [...frame.evidence];
  const { nodes, collectFailed, end } = collect(frame.records, evidence);
  const byNode = new Map<string, RunStatus>();
  for (const [id, n] of nodes) if (n.phases.size > 0) byNode.set(id, statusOf(id, n, evidence));
  const byKey = new Map<string, string[]>();
  for (const [id, n] of nodes) {
    const key = n.key ?? id;
    if (!byKey.has(key)) byKey.set(key, []);
    byKey.get(key)!.push(id);
  }
  const statusMap: StatusMap = {};
  for (const w of wanted) {
    let ids = [...new Set([...(byKey.get(w) ?? []), ...(nodes.has(w) ? [w] : [])])];
    if (ids.length === 0 && prefixMatch && w.split('[').length > w.split(']').length) {
      ids = [...nodes.keys()].filter((id) => id.startsWith(w));
    }
    const statuses = ids.map((id) => byNode.get(id)).filter((s): s is RunStatus => s !== undefined);
    if (statuses.length > 0)
      Object.defineProperty(statusMap, w, {
        value: combine(statuses),
        enumerable: true,
        writable: true,
        configurable: true,
      });
  }
  const canaryIds = new Set(frame.canaries.map((c) => c.id));
  const anyRan = [...nodes].some(([id, n]) => n.phases.has('call') && !canaryIds.has(dropParams(id)));
  const canaries = judgeCanaries(frame, byNode, collectFailed, anyRan);
  for (const c of canaries.filter((v) => !v.ok)) {
    const what = { fail: 'must fail', pass: 'must pass', not_pass: 'must not pass' }[c.expect];
    evidence.push(
      `canary ${c.id} (${c.kind}, ${what}) ${c.seen.length ? `was ${c.seen.join(', ')}` : 'is missing'}`,
    );
  }
  const flags: HackFlag[] = evidence.map((detail) => ({ kind: 'tampered', detail: detail.slice(0, 600) }));
  const exitCode = 'code' in frame.exit ? frame.exit.code : undefined;
  if (end && exitCode !== undefined && exitCode !== end.exitstatus) {
    flags.push({
      kind: 'exit_code_mismatch',
      detail: `the test process exited ${exitCode} but pytest's session ended with status ${end.exitstatus}`,
    });
  }
  return { byNode, statusMap, canaries, flags, exitstatus: end?.exitstatus, exitCode };
}

/**
 * The status map the grading rules see: a F2P or P2P test passes only on `PASSED`; anything else the
 * runner reported (skipped, xfailed, xpassed, errored) counts as failed, absent stays absent (failed).
 * One exception, where SWE-bench main's grader makes it: under `strict`, a skipped P2P test is maintained.
 */
export function gradingStatusMap(
  statusMap: StatusMap,
  passToPass: readonly string[],
  semantics: 'swesmith' | 'strict',
): StatusMap {
  const p2p = new Set(passToPass);
  const out: StatusMap = {};
  for (const [id, status] of Object.entries(statusMap)) {
    const kept = status === 'PASSED' || (semantics === 'strict' && status === 'SKIPPED' && p2p.has(id));
    Object.defineProperty(out, id, {
      value: kept ? status : 'FAILED',
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}
