let ridCounter = 0;

/** A process-unique request id. */
export function newRequestId(prefix = 'vime'): string {
  ridCounter = (ridCounter + 1) % Number.MAX_SAFE_INTEGER;
  return `${prefix}-${process.pid.toString(36)}-${Date.now().toString(36)}-${ridCounter.toString(36)}`;
}
