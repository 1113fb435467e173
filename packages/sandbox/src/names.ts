import { createHash } from 'node:crypto';
import { ConfigError } from '@vime/core';

/** Longest pool name: leaves room under Kubernetes' 63-character label/name limit for a 5-character pod suffix. */
export const MAX_POOL_NAME_LENGTH = 58;

function dnsLabel(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/-+/g, '-')
    .replace(/^-+|-+$/g, '');
}

/**
 * A Kubernetes-safe pool name (lowercase alphanumerics and `-`, starting and ending alphanumeric), at most
 * 58 characters. The run suffix is never truncated: a long base is shortened and given a hash of the full
 * base, so two long bases that share a prefix still get different names.
 *
 * poolName('SWE-smith/pandas-dev__pandas.95b5c9a2', 'run-42') === 'swe-smith-pandas-dev-pandas-95b5c9a2-run-42'
 */
export function poolName(base: string, runSuffix?: string): string {
  const suffix = runSuffix === undefined ? '' : dnsLabel(runSuffix);
  if (runSuffix !== undefined && suffix === '') {
    throw new ConfigError(
      `poolName run suffix ${JSON.stringify(runSuffix)} has no usable characters [a-z0-9-]`,
    );
  }
  const room = MAX_POOL_NAME_LENGTH - (suffix ? suffix.length + 1 : 0);
  if (room < 8) {
    throw new ConfigError(
      `poolName run suffix ${JSON.stringify(runSuffix)} is too long (${suffix.length} characters); ` +
        `keep it under ${MAX_POOL_NAME_LENGTH - 9} so the pool name fits in ${MAX_POOL_NAME_LENGTH}`,
    );
  }
  let head = dnsLabel(base) || 'pool';
  if (head.length > room) {
    const hash = createHash('sha256').update(base).digest('hex').slice(0, 6);
    head = `${head.slice(0, room - 7).replace(/-+$/, '')}-${hash}`;
  }
  return suffix ? `${head}-${suffix}` : head;
}
