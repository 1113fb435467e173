/**
 * Bad `limits` and `workdir` are refused before anything is created, with a ConfigError naming the field,
 * the value and the fix, by every backend's `create`.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@vime/core';
import { afterAll, describe, expect, it } from 'vitest';
import { testImage } from './__fixtures__/support.js';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { dockerProvider } from './docker/provider.js';
import { localProvider } from './host/local-provider.js';
import { DEFAULT_LIMITS, resolveLimits } from './limits.js';
import { dockerForTests } from './testing.js';
import type { SandboxProvider, SandboxSpec } from './types.js';

const rootDir = mkdtempSync(join(tmpdir(), 'vime-limits-test-'));
afterAll(() => rmSync(rootDir, { recursive: true, force: true }));

const backends: Array<[string, () => SandboxProvider, Partial<SandboxSpec>]> = [
  ['bubblewrap', () => bubblewrapProvider({ rootDir }), {}],
  ['local', () => localProvider({ rootDir }), {}],
];
if (dockerForTests()) backends.push(['docker', () => dockerProvider(), { image: testImage }]);

/** [what, limits or workdir, the field the message must name, the fix it must suggest] */
const badLimits: Array<[string, unknown, RegExp, RegExp]> = [
  [
    'negative memory',
    { memoryBytes: -1 },
    /spec\.limits\.memoryBytes.*\(got -1\)/,
    /use e\.g\. memoryBytes: 2 << 30/,
  ],
  ['negative CPU seconds', { cpuSeconds: -5 }, /spec\.limits\.cpuSeconds.*\(got -5\)/, /whole number/],
  ['fractional CPU seconds', { cpuSeconds: 1.5 }, /spec\.limits\.cpuSeconds.*\(got 1\.5\)/, /whole number/],
  ['zero pids', { pids: 0 }, /spec\.limits\.pids.*>= 16 \(got 0\)/, /pids: 512/],
  ['fractional pids', { pids: 10.5 }, /spec\.limits\.pids.*\(got 10\.5\)/, /whole number/],
  [
    'NaN',
    { fileSizeBytes: Number.NaN },
    /spec\.limits\.fileSizeBytes.*\(got NaN\)/,
    /fileSizeBytes: 1 << 30/,
  ],
  [
    'Infinity',
    { openFiles: Number.POSITIVE_INFINITY },
    /spec\.limits\.openFiles.*\(got Infinity\)/,
    /openFiles: 1024/,
  ],
  ['a string value', { memoryBytes: '2G' }, /spec\.limits\.memoryBytes.*\(got "2G"\)/, /number of bytes/],
  ['zero cores', { cpus: 0 }, /spec\.limits\.cpus.*\(got 0\)/, /cpus: 1\.5/],
  [
    'an unknown key',
    { memory: 1 << 30 },
    /spec\.limits\.memory is not a limit/,
    /did you mean memoryBytes\?/,
  ],
  [
    'a misspelt key',
    { pid: 100 },
    /spec\.limits\.pid is not a limit/,
    /did you mean pids\?.*valid limits: memoryBytes, pids/,
  ],
  [
    'a string other than none',
    'unlimited',
    /spec\.limits must be an object of limits or the string 'none' \(got "unlimited"\)/,
    /'none' to run without limits/,
  ],
  ['an array', [1, 2], /spec\.limits must be an object/, /memoryBytes: 2 << 30/],
];

const badWorkdirs: Array<[string, unknown, RegExp]> = [
  [
    'relative',
    'relative/dir',
    /spec\.workdir must be an absolute path \(got "relative\/dir"\); use "\/relative\/dir"/,
  ],
  [
    'dot-relative',
    './testbed',
    /spec\.workdir must be an absolute path \(got "\.\/testbed"\); use "\/testbed"/,
  ],
  ['the root', '/', /spec\.workdir "\/" cannot hold the work dir \(it is the root\)/],
  [
    'under /proc',
    '/proc/self',
    /spec\.workdir "\/proc\/self" cannot hold the work dir \(it is a kernel file system\)/,
  ],
  ['/dev', '/dev', /kernel file system/],
  ['empty', '', /spec\.workdir must be an absolute path such as "\/testbed" \(got ""\)/],
  ['not a string', 42, /spec\.workdir must be an absolute path such as "\/testbed" \(got 42\)/],
];

describe.each(backends)('%s refuses bad limits and work dirs', (_name, makeProvider, extra) => {
  const provider = makeProvider();

  it.each(badLimits)('limits: %s', async (_what, limits, field, fix) => {
    const error = await provider.create({ workdir: '/testbed', limits: limits as 'none', ...extra }).then(
      (s) => s.terminate().then(() => undefined),
      (e: unknown) => e,
    );
    expect(ConfigError.isInstance(error) && error.code === 'invalid_config', String(error)).toBe(true);
    expect((error as Error).message).toMatch(field);
    expect((error as Error).message).toMatch(fix);
    expect(readdirSync(rootDir).filter((n) => n.startsWith('sbx-'))).toEqual([]);
  });

  // Node fires a timer longer than 2^31 − 1 ms after 1 ms: a 30-day lifetime would end at once.
  it.each([
    ['30 days', 30 * 86_400_000],
    ['negative', -5],
    ['zero', 0],
    ['fractional', 1.5],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['a string', '1h'],
  ])('lifetimeMs: %s', async (_what, lifetimeMs) => {
    const error = await provider
      .create({ workdir: '/testbed', lifetimeMs: lifetimeMs as number, ...extra })
      .then(
        (s) => s.terminate().then(() => undefined),
        (e: unknown) => e,
      );
    expect(ConfigError.isInstance(error), String(error)).toBe(true);
    expect((error as Error).message).toMatch(
      /^spec\.lifetimeMs must be whole milliseconds from 1 to 2147483647 \(24\.8 days\), got /,
    );
    expect(readdirSync(rootDir).filter((n) => n.startsWith('sbx-'))).toEqual([]);
  });

  it.each(badWorkdirs)('workdir: %s', async (_what, workdir, message) => {
    const error = await provider.create({ workdir: workdir as string, ...extra }).then(
      (s) => s.terminate().then(() => undefined),
      (e: unknown) => e,
    );
    expect(ConfigError.isInstance(error), String(error)).toBe(true);
    expect((error as Error).message).toMatch(message);
    expect(readdirSync(rootDir).filter((n) => n.startsWith('sbx-'))).toEqual([]);
  });
});

describe('resolveLimits', () => {
  it('fills in the defaults, lifts one limit with null and all with none', () => {
    expect(resolveLimits(undefined)).toEqual(DEFAULT_LIMITS);
    expect(resolveLimits({ pids: 64, memoryBytes: null })).toEqual({
      ...DEFAULT_LIMITS,
      pids: 64,
      memoryBytes: undefined,
    });
    expect(Object.values(resolveLimits('none')).every((v) => v === undefined)).toBe(true);
    expect(resolveLimits({ pids: 64 }, { defaults: false })).toMatchObject({
      pids: 64,
      memoryBytes: undefined,
    });
  });
});
