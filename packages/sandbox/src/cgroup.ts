/**
 * Memory, pids and CPU-share limits through cgroups: v1 controllers (nested under this process's own
 * cgroup, so the host still accounts for them) or a v2 unified hierarchy where it is writable.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import type { ResourceLimits } from './types.js';

const ROOT = '/sys/fs/cgroup';

type Controller = 'memory' | 'pids' | 'cpu';

function ownCgroups(): { v1: Map<string, string>; v2: string | undefined } {
  const v1 = new Map<string, string>();
  let v2: string | undefined;
  let text = '';
  try {
    text = readFileSync('/proc/self/cgroup', 'utf8');
  } catch {
    return { v1, v2 };
  }
  for (const line of text.split('\n')) {
    const [, controllers, path] = line.match(/^\d+:([^:]*):(.*)$/) ?? [];
    if (controllers === undefined || path === undefined) continue;
    if (controllers === '') v2 = path;
    else for (const c of controllers.split(',')) v1.set(c, path);
  }
  return { v1, v2 };
}

/** Which controllers the limits need. */
export function neededControllers(limits: ResourceLimits | undefined): Controller[] {
  const out: Controller[] = [];
  if (limits?.memoryBytes !== undefined) out.push('memory');
  if (limits?.pids !== undefined) out.push('pids');
  if (limits?.cpus !== undefined) out.push('cpu');
  return out;
}

async function writeKnob(dir: string, file: string, value: string, optional = false): Promise<void> {
  try {
    await writeFile(join(dir, file), value);
  } catch (error) {
    if (!optional) throw error;
  }
}

/**
 * Create the cgroups that enforce `limits` and return their directories (write a pid to each
 * `<dir>/cgroup.procs` to put a process under them). Fails closed: a limit that cannot be enforced throws.
 */
export async function createCgroups(name: string, limits: ResourceLimits | undefined): Promise<string[]> {
  const controllers = neededControllers(limits);
  if (controllers.length === 0 || !limits) return [];
  const own = ownCgroups();
  const dirs: string[] = [];
  try {
    const v2Controllers = existsSync(join(ROOT, 'cgroup.controllers'))
      ? readFileSync(join(ROOT, 'cgroup.controllers'), 'utf8').split(/\s+/)
      : [];
    const v2Needed = controllers.filter((c) => !own.v1.has(c) && v2Controllers.includes(c));
    for (const c of controllers) {
      const base = own.v1.get(c);
      if (base === undefined) continue;
      const dir = join(ROOT, c, base, name);
      await mkdir(dir);
      dirs.push(dir);
      await applyV1(dir, c, limits);
    }
    if (v2Needed.length > 0 && own.v2 !== undefined) {
      const parent = join(ROOT, own.v2);
      await writeKnob(parent, 'cgroup.subtree_control', v2Needed.map((c) => `+${c}`).join(' '), true);
      const dir = join(parent, name);
      await mkdir(dir);
      dirs.push(dir);
      for (const c of v2Needed) await applyV2(dir, c, limits);
    }
    const covered = controllers.filter((c) => own.v1.has(c) || v2Needed.includes(c));
    if (covered.length < controllers.length) {
      const missing = controllers.filter((c) => !covered.includes(c));
      throw new Error(`no ${missing.join('/')} cgroup controller is available`);
    }
    return dirs;
  } catch (error) {
    for (const dir of dirs.reverse()) await rmdir(dir).catch(() => {});
    throw new SandboxError(
      `cannot enforce limits ${neededControllers(limits)
        .map((c) => (c === 'memory' ? 'memoryBytes' : c === 'pids' ? 'pids' : 'cpus'))
        .join(', ')}: ${(error as Error).message}. Cgroup limits need root (cgroup v1) or a delegated, ` +
        'writable cgroup v2 subtree; run as root, delegate a cgroup, or drop these limits ' +
        '(cpuSeconds, fileSizeBytes and addressSpaceBytes work without cgroups).',
      { cause: error, data: { limits } },
    );
  }
}

async function applyV1(dir: string, controller: Controller, limits: ResourceLimits): Promise<void> {
  if (controller === 'memory') {
    const bytes = String(limits.memoryBytes);
    await writeKnob(dir, 'memory.limit_in_bytes', bytes);
    // memsw exists only with swap accounting; without it swap is not usable by the group anyway.
    await writeKnob(dir, 'memory.memsw.limit_in_bytes', bytes, true);
  } else if (controller === 'pids') {
    await writeKnob(dir, 'pids.max', String(limits.pids));
  } else {
    await writeKnob(dir, 'cpu.cfs_period_us', '100000');
    await writeKnob(dir, 'cpu.cfs_quota_us', String(Math.max(1000, Math.round(limits.cpus! * 100000))));
  }
}

async function applyV2(dir: string, controller: Controller, limits: ResourceLimits): Promise<void> {
  if (controller === 'memory') {
    await writeKnob(dir, 'memory.max', String(limits.memoryBytes));
    await writeKnob(dir, 'memory.swap.max', '0', true);
  } else if (controller === 'pids') {
    await writeKnob(dir, 'pids.max', String(limits.pids));
  } else {
    await writeKnob(dir, 'cpu.max', `${Math.max(1000, Math.round(limits.cpus! * 100000))} 100000`);
  }
}
