/**
 * Test helpers (the `@vime/core/testing` entry), for tests written with vitest.
 *
 * @module @vime/core/testing
 */
import { it } from 'vitest';
import { findPython, TORCH_MODULES } from '../utils/python.js';

/**
 * For a `describe` block that needs a Python with torch, msgpack and pytest: that Python, or undefined
 * after registering why in the block: a skipped test that says so, or a failing one when
 * `VIME_REQUIRE_TORCH=1` (CI installs Debian's packages, so there a missing torch is a failure).
 */
export function torchPythonOrSkip(): string | undefined {
  const found = findPython(TORCH_MODULES);
  if (!('missing' in found)) return found.python;
  const message =
    `SKIPPED: no Python with torch, msgpack and pytest (${found.missing}). ` +
    'Install Debian’s python3-torch python3-msgpack python3-pytest, or point VIME_PYTHON at one.';
  console.warn(message);
  if (process.env.VIME_REQUIRE_TORCH === '1') {
    it('finds a Python with torch (VIME_REQUIRE_TORCH=1)', () => {
      throw new Error(message);
    });
  } else {
    it.skip(message, () => {});
  }
  return undefined;
}
