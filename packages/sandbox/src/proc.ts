/** Finding processes by an environment marker (Linux /proc), including ones that left their process group. */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';

/** Environment variable that marks every process of one exec, so escaped (`setsid`) children can be found. */
export const EXEC_MARKER_ENV = 'VIME_EXEC_ID';

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
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const env = readFileSync(`/proc/${entry}/environ`);
      if (env.includes(needle)) process.kill(Number(entry), 'SIGKILL');
    } catch {
      // exited or not ours
    }
  }
}

/**
 * Kill every process whose environment carries `name=<value>` with `value` starting with `prefix` and
 * `select(value)` true (Linux /proc scan): processes of a run, found by the run tag in their sandbox id.
 */
export function killByEnvPrefix(name: string, prefix: string, select: (value: string) => boolean): void {
  const needle = Buffer.from(`${name}=${prefix}`);
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${entry}/environ`);
      const at = env.indexOf(needle);
      if (at < 0 || (at > 0 && env[at - 1] !== 0)) continue;
      const end = env.indexOf(0, at);
      const value = env.subarray(at + name.length + 1, end < 0 ? env.length : end).toString();
      if (select(value)) process.kill(Number(entry), 'SIGKILL');
    } catch {
      // exited or not ours
    }
  }
}
