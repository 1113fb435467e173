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
