/**
 * Resource limits: the safe defaults every isolating backend applies, their validation (a `ConfigError`
 * naming the field, the value and the fix), and the per-process rlimits they become.
 */
import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { ConfigError } from '@vime/core';
import type { ResourceLimits } from './types.js';

/** The name of one resource limit. */
export type LimitName = keyof ResourceLimits;

/** Limits after defaults and validation: a number, or undefined for "not limited". */
export type EffectiveLimits = { [K in LimitName]: number | undefined };

const MiB = 1 << 20;
const GiB = 1 << 30;

/**
 * The defaults of bubblewrap and docker sandboxes when a spec names no limit: enough for a repository's
 * test suite, small enough that a fork bomb, a memory hog or a full `/tmp` stays inside the sandbox.
 */
export const DEFAULT_LIMITS: Readonly<EffectiveLimits> = Object.freeze({
  memoryBytes: 2 * GiB,
  pids: 512,
  cpuSeconds: 1800,
  fileSizeBytes: 1 * GiB,
  openFiles: 1024,
  tmpBytes: 512 * MiB,
  addressSpaceBytes: undefined,
  cpus: undefined,
});

/** Smallest accepted value of each limit (the sandbox's own processes need this much), and its kind. */
const RULES: Record<LimitName, { min: number; integer: boolean; unit: string; example: string }> = {
  memoryBytes: { min: 32 * MiB, integer: true, unit: 'bytes', example: 'memoryBytes: 2 << 30' },
  pids: { min: 16, integer: true, unit: 'processes', example: 'pids: 512' },
  cpuSeconds: { min: 1, integer: true, unit: 'seconds', example: 'cpuSeconds: 600' },
  fileSizeBytes: { min: 1, integer: true, unit: 'bytes', example: 'fileSizeBytes: 1 << 30' },
  openFiles: { min: 32, integer: true, unit: 'files', example: 'openFiles: 1024' },
  tmpBytes: { min: MiB, integer: true, unit: 'bytes', example: 'tmpBytes: 512 << 20' },
  addressSpaceBytes: { min: 64 * MiB, integer: true, unit: 'bytes', example: 'addressSpaceBytes: 4 << 30' },
  cpus: { min: 0.01, integer: false, unit: 'cores', example: 'cpus: 1.5' },
};

/** Every resource limit's name. */
export const LIMIT_NAMES = Object.keys(RULES) as LimitName[];

/** A value as an error message shows it (NaN and Infinity included). */
function show(value: unknown): string {
  return typeof value === 'number' ? String(value) : JSON.stringify(value);
}

function suggest(key: string): string {
  const lower = key.toLowerCase();
  const near = LIMIT_NAMES.find(
    (n) => n.toLowerCase().startsWith(lower) || lower.startsWith(n.toLowerCase()),
  );
  return near ? `did you mean ${near}? ` : '';
}

/**
 * Validate `spec.limits` and fill in the defaults (`defaults: false`: only what is given). Throws a
 * `ConfigError` for anything that is not a limit or not a sensible value.
 */
export function resolveLimits(
  limits: unknown,
  options: { field?: string | undefined; defaults?: boolean | undefined } = {},
): EffectiveLimits {
  const field = options.field ?? 'spec.limits';
  const base: EffectiveLimits = options.defaults === false ? noLimits() : { ...DEFAULT_LIMITS };
  if (limits === undefined) return base;
  if (limits === 'none') return noLimits();
  if (typeof limits !== 'object' || limits === null || Array.isArray(limits)) {
    throw new ConfigError(
      `${field} must be an object of limits or the string 'none' (got ${show(limits)}); ` +
        `e.g. { memoryBytes: 2 << 30, pids: 512 }, or 'none' to run without limits`,
    );
  }
  for (const [key, value] of Object.entries(limits)) {
    if (!(key in RULES)) {
      throw new ConfigError(
        `${field}.${key} is not a limit; ${suggest(key)}valid limits: ${LIMIT_NAMES.join(', ')}`,
      );
    }
    const name = key as LimitName;
    if (value === undefined) continue;
    if (value === null) {
      base[name] = undefined;
      continue;
    }
    const rule = RULES[name];
    const ok =
      typeof value === 'number' &&
      Number.isFinite(value) &&
      (!rule.integer || Number.isSafeInteger(value)) &&
      value >= rule.min;
    if (!ok) {
      const kind = rule.integer ? 'a whole number' : 'a number';
      throw new ConfigError(
        `${field}.${name} must be ${kind} of ${rule.unit} >= ${rule.min} (got ${show(value)}); ` +
          `use e.g. ${rule.example}, or null for no ${name} limit`,
      );
    }
    base[name] = value;
  }
  return base;
}

export function noLimits(): EffectiveLimits {
  return Object.fromEntries(LIMIT_NAMES.map((n) => [n, undefined])) as EffectiveLimits;
}

/** Rlimit name (as `prlimit --<name>` and the supervisor spell it) → value. */
export type Rlimits = Partial<Record<'cpu' | 'fsize' | 'nofile' | 'as' | 'data' | 'nproc', number>>;

/**
 * The per-process rlimits a limit set becomes. `memoryBytes` and `pids` are added only where no cgroup
 * enforces them (`fallback`): memory as RLIMIT_DATA per process, pids as RLIMIT_NPROC (which counts the
 * sandbox as a whole when it is set inside the sandbox's own user namespace).
 */
export function rlimitsOf(
  limits: EffectiveLimits,
  fallback: { memory?: boolean | undefined; pids?: boolean | undefined } = {},
): Rlimits {
  const out: Rlimits = {};
  if (limits.cpuSeconds !== undefined) out.cpu = limits.cpuSeconds;
  if (limits.fileSizeBytes !== undefined) out.fsize = limits.fileSizeBytes;
  if (limits.openFiles !== undefined) out.nofile = limits.openFiles;
  if (limits.addressSpaceBytes !== undefined) out.as = limits.addressSpaceBytes;
  if (fallback.memory && limits.memoryBytes !== undefined) out.data = limits.memoryBytes;
  if (fallback.pids && limits.pids !== undefined) out.nproc = limits.pids;
  return out;
}

/** This process's hard limit on open files (an unprivileged process, or root without CAP_SYS_RESOURCE, cannot raise it). */
export function hardOpenFiles(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const hard = line?.trim().split(/\s{2,}/)[2];
    return hard === undefined || hard === 'unlimited' ? undefined : Number(hard);
  } catch {
    return undefined;
  }
}

/** Validate `spec.workdir`: an absolute path where a folder can be bound (not `/` or a kernel file system). */
export function resolveWorkdir(workdir: unknown, field = 'spec.workdir'): string {
  if (typeof workdir !== 'string' || workdir.length === 0 || workdir.includes('\0')) {
    throw new ConfigError(`${field} must be an absolute path such as "/testbed" (got ${show(workdir)})`);
  }
  if (!workdir.startsWith('/')) {
    throw new ConfigError(
      `${field} must be an absolute path (got ${JSON.stringify(workdir)}); use ${JSON.stringify(`/${workdir.replace(/^\.\/+/, '')}`)} ` +
        'if that is what you meant',
    );
  }
  const normalized = posix.resolve(workdir);
  const reserved = ['/proc', '/dev', '/sys'];
  if (normalized === '/' || reserved.some((r) => normalized === r || normalized.startsWith(`${r}/`))) {
    throw new ConfigError(
      `${field} ${JSON.stringify(workdir)} cannot hold the work dir (it is ${normalized === '/' ? 'the root' : 'a kernel file system'}); ` +
        'use a folder of its own such as "/testbed"',
    );
  }
  return normalized;
}

/** The longest timer Node keeps (a longer one fires after 1 ms). */
const MAX_LIFETIME_MS = 2 ** 31 - 1;

/** Validate `spec.lifetimeMs`: absent, or whole milliseconds from 1 to 2^31 − 1 (24.8 days). */
export function checkLifetime(lifetimeMs: unknown, field = 'spec.lifetimeMs'): void {
  if (lifetimeMs === undefined) return;
  if (
    typeof lifetimeMs !== 'number' ||
    !Number.isInteger(lifetimeMs) ||
    lifetimeMs < 1 ||
    lifetimeMs > MAX_LIFETIME_MS
  ) {
    throw new ConfigError(
      `${field} must be whole milliseconds from 1 to ${MAX_LIFETIME_MS} (24.8 days), got ${show(lifetimeMs)}; ` +
        'e.g. lifetimeMs: 2 * 3600_000, or leave it out for no lifetime',
    );
  }
}
