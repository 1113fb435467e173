/**
 * Test helpers (the `@vime/core/testing` entry), for tests written with vitest.
 *
 * @module @vime/core/testing
 */
import { it } from 'vitest';
import { findPython, TORCH_MODULES } from '../utils/python.js';

/** Whether a run must have every component its tests need (CI installs them all: a skip there is a failure). */
export function requireAll(env: Record<string, string | undefined> = process.env): boolean {
  return env.VIME_REQUIRE_ALL === '1' || env.VIME_REQUIRE_TORCH === '1';
}

/**
 * Whether a component the following tests need is here (`present`). When it is not, they are skipped with
 * a printed reason, or, under `VIME_REQUIRE_ALL=1`, a test fails naming what is missing and `fix`. Call it
 * while tests are collected (at a file's top level or in a `describe`), e.g.
 * `describe.runIf(available('a Docker engine', dockerAvailable(), 'source scripts/docker-up.sh'))(…)`.
 */
export function available(what: string, present: boolean, fix: string): boolean {
  if (present) return true;
  const message = `SKIPPED: no ${what}. ${fix}`;
  console.warn(message);
  if (requireAll()) {
    it(`has ${what} (VIME_REQUIRE_ALL=1: a missing component fails the run)`, () => {
      throw new Error(message);
    });
  } else {
    it.skip(message, () => {});
  }
  return false;
}

/**
 * For a `describe` block that needs a Python with torch, msgpack and pytest: that Python, or undefined
 * after `available` registered why in the block.
 */
export function torchPythonOrSkip(): string | undefined {
  const found = findPython(TORCH_MODULES);
  if (!('missing' in found)) return found.python;
  const fix = `(${found.missing}). Install Debian’s python3-torch python3-msgpack python3-pytest, or point VIME_PYTHON at one.`;
  available('Python with torch, msgpack and pytest', false, fix);
  return undefined;
}
