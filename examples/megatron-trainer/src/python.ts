import { spawnSync } from 'node:child_process';

/**
 * A Python interpreter that can run the trainer's CPU code (torch, msgpack, pytest), or the reason
 * there is none. `VIME_PYTHON` names one explicitly; otherwise `python3` and the system's
 * `/usr/bin/python3` (where Debian's python3-torch lives) are tried in turn.
 */
export function findTorchPython(): { python: string } | { missing: string } {
  const candidates = [process.env.VIME_PYTHON, 'python3', '/usr/bin/python3'].filter(
    (c): c is string => typeof c === 'string' && c.length > 0,
  );
  const reasons: string[] = [];
  for (const python of new Set(candidates)) {
    const probe = spawnSync(python, ['-c', 'import torch, msgpack, pytest; print(torch.__version__)'], {
      encoding: 'utf8',
    });
    if (probe.status === 0) return { python };
    const why = probe.error?.message ?? probe.stderr.trim().split('\n').at(-1) ?? `exit ${probe.status}`;
    reasons.push(`${python}: ${why}`);
  }
  return { missing: reasons.join('; ') };
}
