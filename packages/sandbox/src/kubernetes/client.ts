/**
 * The Kubernetes API through the official client (`@kubernetes/client-node`): the kubeconfig (a file,
 * `KUBECONFIG`, `~/.kube/config` or the in-cluster service account), the namespace, label rules, and the
 * client's errors as typed ones: a 429 is a `KubernetesRateLimitError` carrying the server's Retry-After.
 */
import { readFileSync } from 'node:fs';
import { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { ConfigError, errorMarker, hasErrorMarker, SandboxError } from '@vime/core';
import { retryAfterMs } from '@vime/core/utils';

const rateLimitMarker = errorMarker('KubernetesRateLimitError');

/**
 * The API server answered 429 Too Many Requests (API Priority and Fairness, or a webhook's limit):
 * `retryAfterMs` is its `Retry-After`, so a fleet's rate limiter can wait exactly that long.
 */
export class KubernetesRateLimitError extends SandboxError {
  readonly [rateLimitMarker] = true;
  /** The server's `Retry-After` in milliseconds (undefined when it sent none). */
  readonly retryAfterMs: number | undefined;
  constructor(message: string, options: { retryAfterMs?: number | undefined; cause?: unknown } = {}) {
    super(message, {
      code: 'rate_limited',
      cause: options.cause,
      data: options.retryAfterMs === undefined ? {} : { retryAfterMs: options.retryAfterMs },
    });
    this.retryAfterMs = options.retryAfterMs;
  }

  /** Whether `value` is a `KubernetesRateLimitError`, from any copy of this package. */
  static override isInstance(value: unknown): value is KubernetesRateLimitError {
    return hasErrorMarker(value, rateLimitMarker);
  }
}

/** What the client throws for a non-2xx answer (its `ApiException`): the status code, body and headers. */
interface ApiFailure {
  code: number;
  body?: unknown;
  headers?: Record<string, string> | undefined;
}

function isApiFailure(error: unknown): error is ApiFailure {
  return typeof error === 'object' && error !== null && typeof (error as ApiFailure).code === 'number';
}

/** The HTTP status of a failed API call, or undefined when it never got an answer. */
export function statusOf(error: unknown): number | undefined {
  return isApiFailure(error) ? error.code : undefined;
}

/** The `message` of a Kubernetes `Status` body, else the body as text. */
function statusMessage(body: unknown): string {
  let value = body;
  if (typeof body === 'string') {
    try {
      value = JSON.parse(body);
    } catch {
      return body.slice(0, 1000);
    }
  }
  const message = (value as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' ? message : JSON.stringify(value ?? '').slice(0, 1000);
}

/** A failed API call as a typed error: 429 → `KubernetesRateLimitError`, 404 → `not_found`, else `SandboxError`. */
export function kubeError(what: string, error: unknown): Error {
  if (!isApiFailure(error)) {
    return new SandboxError(`${what}: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
      code: 'kubernetes_unreachable',
    });
  }
  const message = statusMessage(error.body);
  if (error.code === 429) {
    const header = Object.entries(error.headers ?? {}).find(([k]) => k.toLowerCase() === 'retry-after')?.[1];
    const wait = retryAfterMs(header);
    return new KubernetesRateLimitError(
      `${what}: the API server is rate limiting (429${wait === undefined ? '' : `, retry after ${wait} ms`}): ${message}`,
      { retryAfterMs: wait, cause: error },
    );
  }
  return new SandboxError(`${what}: HTTP ${error.code}: ${message}`, {
    cause: error,
    code: error.code === 404 ? 'not_found' : error.code === 409 ? 'conflict' : 'kubernetes_error',
    data: { status: error.code },
  });
}

/** Run one API call, its failure as a typed error. */
export async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    throw kubeError(what, error);
  }
}

/** Where the client finds its cluster. */
export interface KubeConnection {
  /** A loaded `KubeConfig`; default: `kubeconfig` if given, else `KUBECONFIG`, `~/.kube/config` or in-cluster. */
  kubeConfig?: KubeConfig | undefined;
  /** Path of a kubeconfig file. */
  kubeconfig?: string | undefined;
  /** Namespace (default: the context's, else the pod's own in-cluster, else `default`). */
  namespace?: string | undefined;
}

/** The clients of one connection. */
export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  namespace: string;
}

const IN_CLUSTER_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

/** Load the kubeconfig and make the API clients. */
export function kubeClients(options: KubeConnection): KubeClients {
  let kc = options.kubeConfig;
  if (!kc) {
    kc = new KubeConfig();
    try {
      if (options.kubeconfig) kc.loadFromFile(options.kubeconfig);
      else kc.loadFromDefault();
    } catch (error) {
      throw new ConfigError(
        `kubernetesProvider: cannot load the kubeconfig ${JSON.stringify(options.kubeconfig ?? process.env.KUBECONFIG ?? '~/.kube/config')}: ${(error as Error).message}; pass { kubeconfig: PATH }, set KUBECONFIG, or run in a pod with a service account`,
        { cause: error },
      );
    }
  }
  if (!kc.getCurrentCluster()) {
    throw new ConfigError(
      'kubernetesProvider: the kubeconfig names no current cluster; set its current-context, or pass { kubeconfig: PATH }',
    );
  }
  let namespace = options.namespace ?? kc.getContextObject(kc.getCurrentContext())?.namespace;
  if (!namespace) {
    try {
      namespace = readFileSync(IN_CLUSTER_NAMESPACE, 'utf8').trim() || undefined;
    } catch {
      // not in a cluster
    }
  }
  namespace ??= 'default';
  if (!DNS_LABEL.test(namespace)) {
    throw new ConfigError(
      `kubernetesProvider namespace ${JSON.stringify(namespace)} is not a DNS label (lowercase letters, digits and "-", at most 63)`,
    );
  }
  return { kc, core: kc.makeApiClient(CoreV1Api), custom: kc.makeApiClient(CustomObjectsApi), namespace };
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;

/** Whether `key=value` is a valid Kubernetes label (an optional DNS-subdomain prefix, a name, a value). */
export function isLabel(key: string, value: string): boolean {
  const slash = key.lastIndexOf('/');
  const name = slash < 0 ? key : key.slice(slash + 1);
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  if (prefix !== undefined && !(prefix.length <= 253 && /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(prefix)))
    return false;
  return LABEL_NAME.test(name) && LABEL_VALUE.test(value);
}

/**
 * Split a sandbox's labels: valid Kubernetes labels go on the objects as labels (the run label must be
 * one, so `reapOrphans` can select by it); every label also goes into annotations verbatim (the owner
 * label `host:pid:ticks` is not a valid label value).
 */
export function objectMeta(labels: Record<string, string>): {
  labels: Record<string, string>;
  annotations: Record<string, string>;
} {
  const valid: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels)) if (isLabel(k, v)) valid[k] = v;
  return { labels: valid, annotations: { ...labels } };
}
