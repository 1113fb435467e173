/** SWE-bench's `TestStatus` values, in the enum's declaration order (parsers iterate in this order). */
export const TEST_STATUSES = ['FAILED', 'PASSED', 'SKIPPED', 'ERROR', 'XFAIL'] as const;
/** A test's status in a parsed log. */
export type TestStatus = (typeof TEST_STATUSES)[number];

/**
 * Test id → status. Upstream parsers occasionally record a raw token that is not a `TestStatus`
 * (e.g. `ERROR:`); those are kept as-is so grading sees exactly what upstream saw.
 */
export type StatusMap = Record<string, TestStatus | (string & {})>;

/** SWE-bench version whose parser behaviour is reproduced. */
export type SwebenchRef = 'v4.1.0' | 'main';

/** A log parser: the whole test log in, a status map out. */
export type LogParser = (log: string) => StatusMap;

/** An empty status map (a plain object: far faster to fill than a prototype-less one). */
export function newStatusMap(): StatusMap {
  return {};
}

/** `map[id] = status`, except that a test named `__proto__` becomes an own key instead of a prototype change. */
export function record(map: StatusMap, id: string, status: string): void {
  if (id === '__proto__')
    Object.defineProperty(map, id, { value: status, enumerable: true, writable: true, configurable: true });
  else map[id] = status;
}
