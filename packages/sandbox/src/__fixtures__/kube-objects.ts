// Shared by the STAND-IN Kubernetes API server and its stand-in agent-sandbox controller (tests only):
// open JSON objects, the API server's Status errors, its metadata validation and label selectors.
import { randomBytes } from 'node:crypto';

// biome-ignore lint/suspicious/noExplicitAny: Kubernetes objects are open JSON here, as on the wire.
export type KubeObject = Record<string, any>;

export class StatusError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

export function statusBody(code: number, reason: string, message: string): KubeObject {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;

/** The API server's metadata validation (names, labels), as a 422 Invalid. */
export function validateMeta(kind: string, meta: KubeObject | undefined): void {
  const name = meta?.name;
  if (typeof name !== 'string' || !DNS_SUBDOMAIN.test(name)) {
    throw new StatusError(422, 'Invalid', `${kind} "${name}" is invalid: metadata.name: Invalid value: "${name}"`);
  }
  for (const [k, v] of Object.entries((meta?.labels ?? {}) as Record<string, unknown>)) {
    const key = k.slice(k.lastIndexOf('/') + 1);
    if (!LABEL_NAME.test(key) || typeof v !== 'string' || !LABEL_VALUE.test(v)) {
      throw new StatusError(422, 'Invalid', `${kind} "${name}" is invalid: metadata.labels: Invalid value: "${v}"`);
    }
  }
}

/** `a=b,c` (equality and existence requirements, the forms the provider sends). */
export function selects(selector: string | null, labels: Record<string, string> | undefined): boolean {
  if (!selector) return true;
  return selector.split(',').every((req) => {
    const [k, v] = req.split('=');
    if (k === undefined) return true;
    return v === undefined ? labels?.[k] !== undefined : labels?.[k] === v;
  });
}

/** A random lowercase suffix, as the controllers' generated names have. */
export function randomSuffix(): string {
  return randomBytes(3).toString('hex').slice(0, 5);
}
