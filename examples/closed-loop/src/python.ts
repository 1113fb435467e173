/**
 * Where the example's Python programs come from: the project's Python distribution (`python/` at the
 * repository root: `vime_policy`, the policy server and warm start; `vime_megatron`, the trainer). The
 * bundle (scripts/bundle.sh) keeps the same layout around the example, so both find it here.
 */
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The example folder (the working directory of its Python processes). */
export const exampleDir = fileURLToPath(new URL('..', import.meta.url));
const pythonDir = join(exampleDir, '..', '..', 'python');

/**
 * The import path of the project's Python: its sources, and megatron.core's source when
 * python/scripts/vendor-megatron.sh put it under python/.vendor (a machine that cannot pip install it).
 */
export function pythonPath(): string[] {
  const vendor = join(pythonDir, '.vendor', 'megatron-lm');
  return [join(pythonDir, 'src'), ...(existsSync(join(vendor, 'megatron', 'core')) ? [vendor] : [])];
}

/** Environment for the project's Python programs: `pythonPath()` ahead of the caller's PYTHONPATH. */
export function pythonEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const path = [...pythonPath(), process.env.PYTHONPATH].filter(Boolean).join(delimiter);
  return { ...process.env, PYTHONPATH: path, PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1', ...extra };
}
