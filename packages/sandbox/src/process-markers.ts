/** Finding processes by an environment marker (Linux /proc), including ones that left their process group. */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';

/** Environment variable that marks every process of one exec, so escaped (`setsid`) children can be found. */
export const EXEC_MARKER_ENV = 'VIME_EXEC_ID';

/**
 * A shell script, run inside a sandbox as `sh -c KILL_MARKED sh <name> <value>`, that kills every process
 * whose environment carries `name=value` (its /proc scan, three passes for children forked meanwhile).
 */
export const KILL_MARKED =
  'cd /proc && for pass in 1 2 3; do for p in [0-9]*; do if grep -qz "^$1=$2\\$" "$p/environ" 2>/dev/null; then kill -9 "$p" 2>/dev/null; fi; done; done; true';

/** A fresh value for `EXEC_MARKER_ENV`, marking one exec's processes. */
export function newExecId(): string {
  return randomBytes(6).toString('hex');
}

/** Environment variable that marks every process of one local sandbox, so terminate and the reaper find them all. */
export const SANDBOX_MARKER_ENV = 'VIME_SANDBOX_ID';

/** Kill every process whose environment carries `VIME_EXEC_ID=<execId>` (Linux /proc scan). */
export function killByExecMarker(execId: string): void {
  killByEnv(EXEC_MARKER_ENV, execId);
}

/** Kill every process whose environment carries `name=value` (Linux /proc scan). */
export function killByEnv(name: string, value: string): void {
  const needle = Buffer.from(`${name}=${value}\0`);
  killUntilGone((env) => env.includes(needle));
}

/**
 * Kill every process whose environment carries `name=<value>` with `value` starting with `prefix` and
 * `select(value)` true (Linux /proc scan): processes of a run, found by the run tag in their sandbox id.
 */
export function killByEnvPrefix(name: string, prefix: string, select: (value: string) => boolean): void {
  const needle = Buffer.from(`${name}=${prefix}`);
  killUntilGone((env) => {
    const at = env.indexOf(needle);
    if (at < 0 || (at > 0 && env[at - 1] !== 0)) return false;
    const end = env.indexOf(0, at);
    return select(env.subarray(at + name.length + 1, end < 0 ? env.length : end).toString());
  });
}

/** How long a kill scans again for marked processes that are not gone yet. */
const KILL_WAIT_MS = 2_000;
const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * SIGKILL every other process whose environment is `marked`, then scan again until none is left: a
 * process forked during a scan escapes it, and a killed one keeps its environment until it has exited
 * (an exited child not yet reaped shows an empty one). Synchronous, for exit hooks.
 */
function killUntilGone(marked: (env: Buffer) => boolean): void {
  const deadline = Date.now() + KILL_WAIT_MS;
  for (;;) {
    let entries: string[];
    try {
      entries = readdirSync('/proc');
    } catch {
      return;
    }
    let found = 0;
    for (const entry of entries) {
      if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
      try {
        if (!marked(readFileSync(`/proc/${entry}/environ`))) continue;
        process.kill(Number(entry), 'SIGKILL');
        found++;
      } catch {
        // exited or not ours
      }
    }
    if (found === 0 || Date.now() >= deadline) return;
    Atomics.wait(pause, 0, 0, 5);
  }
}
