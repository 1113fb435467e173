/**
 * The in-namespace supervisor of a bubblewrap session: `python/vime_sandbox_supervisor.py`, run by the
 * sandbox's own python3 (`python3 -c <source>`, so nothing is written into the sandbox). It forks each
 * command inside the namespaces bwrap built once, pipes its input and output over fd 3 and reports its exit
 * status; session.ts speaks the other end.
 *
 * Frames: `[op: u8][exec id: u32 BE][length: u32 BE][payload]`.
 * Host → supervisor: 1 run (JSON `{argv, env, cwd, stdin, cg}`), 2 stdin bytes, 3 stdin end, 4 kill,
 * 5 spare (a cgroup name: fork a child that moves into it and waits for the next command).
 * Supervisor → host: 1 stdout, 2 stderr, 3 exit (i32 BE: the code, or minus the signal), 9 ready.
 *
 * `argv[1]`: the rlimits of every command (JSON); `argv[2]`: the fd of the sandbox's exec-cgroup folder,
 * or empty.
 */
import { pythonAsset } from '../python-assets.js';

/** The supervisor's Python source. */
export function supervisorSource(): string {
  return pythonAsset('vime_sandbox_supervisor.py');
}
