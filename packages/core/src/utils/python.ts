import { spawnSync } from 'node:child_process';

/** The Python modules the project's trainer and policy server import (Debian: python3-torch, …). */
export const TORCH_MODULES: readonly string[] = ['torch', 'msgpack', 'pytest'];

/**
 * A Python interpreter that can import `modules`, or the reason there is none. `VIME_PYTHON` names one
 * explicitly; otherwise `python3` and the system's `/usr/bin/python3` (where Debian's packages live) are
 * tried in turn.
 */
export function findPython(
  modules: readonly string[] = TORCH_MODULES,
  env: Record<string, string | undefined> = process.env,
): { python: string } | { missing: string } {
  const candidates = [env.VIME_PYTHON, 'python3', '/usr/bin/python3'].filter(
    (c): c is string => typeof c === 'string' && c.length > 0,
  );
  const reasons: string[] = [];
  for (const python of new Set(candidates)) {
    const probe = spawnSync(python, ['-c', `import ${modules.join(', ')}`], { encoding: 'utf8' });
    if (probe.status === 0) return { python };
    const why = probe.error?.message ?? probe.stderr.trim().split('\n').at(-1) ?? `exit ${probe.status}`;
    reasons.push(`${python}: ${why}`);
  }
  return { missing: reasons.join('; ') };
}
