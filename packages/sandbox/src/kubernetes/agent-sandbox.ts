/**
 * Sandboxes claimed through agent-sandbox (kubernetes-sigs/agent-sandbox): a `SandboxTemplate` and a
 * `SandboxWarmPool` per image and pod spec, a `SandboxClaim` per sandbox; the claim's controller binds a
 * warm `Sandbox` (or cold-starts one), and commands run in that sandbox's pod. Releasing a sandbox deletes
 * its claim (which deletes its sandbox and pod); the pool refills itself.
 *
 * Wire facts, from kubernetes-sigs/agent-sandbox (API version v1beta1):
 * - extensions/api/v1beta1/groupversion_info.go @ 0720e24474d4798b050d2d121fcb8f2f5babf121: group
 *   `extensions.agents.x-k8s.io`, kinds SandboxTemplate, SandboxWarmPool, SandboxClaim.
 * - extensions/api/v1beta1/sandboxtemplate_types.go @ 0296effbeb56ef57bd588d773b232b3c0025904d:
 *   `spec.podTemplate.{spec,metadata}`.
 * - extensions/api/v1beta1/sandboxwarmpool_types.go @ 1197eaee96c4646bbe83fc78298e7337b6ee8254:
 *   `spec.replicas`, `spec.sandboxTemplateRef.name`; status `replicas`, `readyReplicas`.
 * - extensions/api/v1beta1/sandboxclaim_types.go @ 07b6d8df32109dff2511a678e83b39104cce5c3a:
 *   `spec.warmPoolRef.name`, `spec.additionalPodMetadata.labels`, `spec.lifecycle.{shutdownTime,
 *   shutdownPolicy}`; status `conditions`, `sandbox.name`.
 * - api/v1beta1/sandbox_types.go @ 040bc60f45bceb4ad347b032b7b0de4e4bb3656e: `Sandbox` in
 *   `agents.x-k8s.io`; annotation `agents.x-k8s.io/pod-name` (the adopted warm pod), label
 *   `agents.x-k8s.io/launch-type` (`warm` or `cold`), condition `Ready`.
 */
import { createHash } from 'node:crypto';
import type { V1PodSpec } from '@kubernetes/client-node';
import { SandboxError } from '@vime/core';
import { sleep } from '@vime/core/utils';
import { poolName } from '../names.js';
import { call, type KubeClients, statusOf } from './client.js';

export const EXTENSIONS_GROUP = 'extensions.agents.x-k8s.io';
export const SANDBOX_GROUP = 'agents.x-k8s.io';
export const AGENT_SANDBOX_VERSION = 'v1beta1';
const POD_NAME_ANNOTATION = 'agents.x-k8s.io/pod-name';
const LAUNCH_TYPE_LABEL = 'agents.x-k8s.io/launch-type';

interface Condition {
  type: string;
  status: string;
  reason?: string | undefined;
  message?: string | undefined;
}

interface ClaimObject {
  metadata?: { name?: string | undefined } | undefined;
  status?:
    | { conditions?: Condition[] | undefined; sandbox?: { name?: string | undefined } | undefined }
    | undefined;
}

interface SandboxObject {
  metadata?:
    | { annotations?: Record<string, string> | undefined; labels?: Record<string, string> | undefined }
    | undefined;
}

/** Options of the agent-sandbox mode. */
export interface AgentSandboxOptions {
  /** Warm sandboxes each pool keeps ready (default 1). */
  replicas?: number | undefined;
}

/** The claimed sandbox: its pod, and whether it came warm from the pool. */
export interface ClaimedPod {
  pod: string;
  warm: boolean;
}

const custom = (plural: string, group = EXTENSIONS_GROUP) => ({
  group,
  version: AGENT_SANDBOX_VERSION,
  plural,
});

/** Create an object unless it exists (409 is fine: another process made the same one). */
async function ensure(clients: KubeClients, plural: string, body: Record<string, unknown>): Promise<void> {
  try {
    await clients.custom.createNamespacedCustomObject({
      ...custom(plural),
      namespace: clients.namespace,
      body,
    });
  } catch (error) {
    if (statusOf(error) === 409) return;
    throw error;
  }
}

/** Templates and warm pools of one provider: one of each per pod spec, made once. */
export class WarmPools {
  readonly #clients: KubeClients;
  readonly #replicas: number;
  readonly #made = new Map<string, Promise<void>>();

  constructor(clients: KubeClients, options: AgentSandboxOptions) {
    this.#clients = clients;
    this.#replicas = options.replicas ?? 1;
  }

  /** The pool of a pod spec (a template and a warm pool of the same name), created on first use. */
  async poolFor(image: string, spec: V1PodSpec, labels: Record<string, string>): Promise<string> {
    const hash = createHash('sha256').update(JSON.stringify(spec)).digest('hex').slice(0, 10);
    const name = poolName(`vime-${image}`, hash);
    let made = this.#made.get(name);
    if (!made) {
      const metadata = { name, labels };
      made = call(`creating agent-sandbox pool ${name}`, async () => {
        await ensure(this.#clients, 'sandboxtemplates', {
          apiVersion: `${EXTENSIONS_GROUP}/${AGENT_SANDBOX_VERSION}`,
          kind: 'SandboxTemplate',
          metadata,
          spec: { podTemplate: { metadata: { labels: {} }, spec } },
        });
        await ensure(this.#clients, 'sandboxwarmpools', {
          apiVersion: `${EXTENSIONS_GROUP}/${AGENT_SANDBOX_VERSION}`,
          kind: 'SandboxWarmPool',
          metadata,
          spec: { replicas: this.#replicas, sandboxTemplateRef: { name } },
        });
      });
      made.catch(() => this.#made.delete(name));
      this.#made.set(name, made);
    }
    await made;
    return name;
  }
}

/** Create a claim on a pool; the pod gets the sandbox's labels, and the claim ends at `shutdownAt`. */
export async function createClaim(
  clients: KubeClients,
  claim: string,
  pool: string,
  meta: { labels: Record<string, string>; annotations: Record<string, string> },
  shutdownAt: Date | undefined,
): Promise<void> {
  await call(`creating SandboxClaim ${clients.namespace}/${claim}`, () =>
    clients.custom.createNamespacedCustomObject({
      ...custom('sandboxclaims'),
      namespace: clients.namespace,
      body: {
        apiVersion: `${EXTENSIONS_GROUP}/${AGENT_SANDBOX_VERSION}`,
        kind: 'SandboxClaim',
        metadata: { name: claim, ...meta },
        spec: {
          warmPoolRef: { name: pool },
          additionalPodMetadata: { labels: meta.labels },
          ...(shutdownAt
            ? { lifecycle: { shutdownTime: shutdownAt.toISOString(), shutdownPolicy: 'Delete' } }
            : {}),
        },
      },
    }),
  );
}

/** Wait until the claim is bound to a ready sandbox; its pod's name and whether it was warm. */
export async function waitClaimed(
  clients: KubeClients,
  claim: string,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<ClaimedPod> {
  const { namespace } = clients;
  const deadline = Date.now() + timeoutMs;
  let delay = 50;
  let seen: ClaimObject | undefined;
  while (Date.now() + delay <= deadline) {
    signal?.throwIfAborted();
    seen = (await call(`reading SandboxClaim ${namespace}/${claim}`, () =>
      clients.custom.getNamespacedCustomObject({ ...custom('sandboxclaims'), namespace, name: claim }),
    )) as ClaimObject;
    const ready = seen.status?.conditions?.find((c) => c.type === 'Ready');
    const sandbox = seen.status?.sandbox?.name;
    if (ready?.status === 'True' && sandbox) {
      const object = (await call(`reading Sandbox ${namespace}/${sandbox}`, () =>
        clients.custom.getNamespacedCustomObject({
          ...custom('sandboxes', SANDBOX_GROUP),
          namespace,
          name: sandbox,
        }),
      )) as SandboxObject;
      return {
        pod: object.metadata?.annotations?.[POD_NAME_ANNOTATION] ?? sandbox,
        warm: object.metadata?.labels?.[LAUNCH_TYPE_LABEL] === 'warm',
      };
    }
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 1000);
  }
  const ready = seen?.status?.conditions?.find((c) => c.type === 'Ready');
  throw new SandboxError(
    `SandboxClaim ${namespace}/${claim} was not bound to a ready sandbox within ${timeoutMs} ms` +
      `${ready ? ` (Ready ${ready.status}: ${ready.reason ?? ''} ${ready.message ?? ''})` : ''}; ` +
      'check that the agent-sandbox controller runs with its extensions, or raise startTimeoutMs',
    { code: 'pod_start_timeout' },
  );
}

/** Delete a claim (its sandbox and pod go with it); one already gone is fine. */
export async function deleteClaim(clients: KubeClients, claim: string): Promise<void> {
  try {
    await clients.custom.deleteNamespacedCustomObject({
      ...custom('sandboxclaims'),
      namespace: clients.namespace,
      name: claim,
      propagationPolicy: 'Background',
    });
  } catch (error) {
    if (statusOf(error) === 404) return;
    throw error;
  }
}

/** Claims of a label selector (none where agent-sandbox is not installed). */
export async function listClaims(
  clients: KubeClients,
  labelSelector: string,
): Promise<
  Array<{ metadata?: { name?: string; annotations?: Record<string, string>; creationTimestamp?: string } }>
> {
  try {
    const list = (await clients.custom.listNamespacedCustomObject({
      ...custom('sandboxclaims'),
      namespace: clients.namespace,
      labelSelector,
    })) as { items?: Array<{ metadata?: { name?: string } }> };
    return list.items ?? [];
  } catch (error) {
    if (statusOf(error) === 404) return [];
    throw error;
  }
}
