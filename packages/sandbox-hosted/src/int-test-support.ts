/** Helpers of the integration tests against the vendors' stand-ins (not part of the package's API). */
import { readdirSync, readFileSync } from 'node:fs';

/** Processes of this host whose environment carries `name=value`. */
export function processesWith(name: string, value: string): number[] {
  const needle = Buffer.from(`${name}=${value}\0`);
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/environ`).includes(needle);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Whether no process of stand-in sandbox `boxId` has a command line starting with `argv` (NUL-joined). */
export function noProcessRunning(boxId: string, argv: readonly string[]): boolean {
  const prefix = argv.join('\0');
  return processesWith('VIME_STANDIN_BOX', boxId).every((pid) => {
    try {
      return !readFileSync(`/proc/${pid}/cmdline`).toString().startsWith(prefix);
    } catch {
      return true;
    }
  });
}

/** Polls `check` until it holds; fails after `budgetMs` naming what it waited for. */
export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  budgetMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + budgetMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`waited ${budgetMs} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
