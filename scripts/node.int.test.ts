/**
 * Which Node the scripts run on (`scripts/node.sh`), with stand-in `node` programs in place of the machine's
 * and of the pinned releases in `.node/` (so nothing is fetched): the machine's when it is 22 or later, else
 * the pinned LTS, first on PATH and named in the log; a refused choice fails with the fix.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('node.sh', import.meta.url));
const LTS = '26.12.1';
const made: string[] = [];
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A `node` that reports `version` and, asked to prove it runs, answers `runs`. */
function fakeNode(dir: string, version: string, runs = true): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, 'node');
  const major = version.split('.')[0];
  writeFileSync(
    path,
    `#!/bin/sh\ncase "$1" in -v) echo v${version} ;; -p) echo ${major} ;; -e) ${runs ? '[ "$3" = "' + version + '" ]' : 'exit 1'} ;; esac\n`,
  );
  chmodSync(path, 0o755);
  return path;
}

/** A machine whose Node is `machine`, with the pinned LTS already in its `.node/` folder. */
function machine(version: string, ltsRuns = true) {
  const root = mkdtempSync(join(tmpdir(), 'vime-node-'));
  made.push(root);
  const machineNode = fakeNode(join(root, 'bin'), version);
  const lts = fakeNode(join(root, 'dot-node', `${LTS}-linux-${process.arch}`, 'bin'), LTS, ltsRuns);
  const use = (choice = '') =>
    spawnSync('bash', ['-c', `source "${script}" && vime_use_node ${choice} && command -v node && node -v`], {
      encoding: 'utf8',
      env: { PATH: `${join(root, 'bin')}:/usr/bin:/bin`, VIME_NODE_DIR: join(root, 'dot-node') },
    });
  return { machineNode, lts, use };
}

describe('scripts/node.sh', () => {
  it('runs a machine whose Node is older than 22 on the pinned LTS, first on PATH, and says which', () => {
    const { lts, use } = machine('20.20.2');
    const r = use();
    expect(r.status).toBe(0);
    expect(r.stdout.split('\n').slice(0, 2)).toEqual([lts, `v${LTS}`]);
    expect(r.stderr).toContain(
      `Node v${LTS}: ${lts} (npm package node-linux-${process.arch}@${LTS}; the machine's: v20.20.2)`,
    );
  });

  it("keeps the machine's Node when it is 22 or later", () => {
    const { machineNode, use } = machine('24.3.0');
    const r = use();
    expect(r.status).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe(machineNode);
    expect(r.stderr).toContain(`Node v24.3.0: ${machineNode} (the machine's)`);
  });

  it('takes the LTS when asked, whatever the machine has', () => {
    const { lts, use } = machine('24.3.0');
    expect(use('lts').stdout.split('\n')[0]).toBe(lts);
  });

  it("refuses the machine's older Node when asked for it, naming the fix", () => {
    const r = machine('20.20.2').use('system');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(
      "VIME_NODE=system: this machine's Node is v20.20.2; Vime needs >= 22 (unset VIME_NODE",
    );
  });

  it('refuses an unknown choice with exit 2', () => {
    const r = machine('24.3.0').use('20');
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('VIME_NODE=20: expected auto, lts, oldest or system');
  });

  it('refuses a pinned release that does not run on this machine', () => {
    const { lts, use } = machine('20.20.2', false);
    const r = use();
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${lts} does not run on this machine`);
  });
});
