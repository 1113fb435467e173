/**
 * Pods for sandboxes: the pod spec a sandbox spec becomes (image, work dir, env, resources, a memory-backed
 * `/tmp`, no service account token, `activeDeadlineSeconds`), waiting for it to run, and deleting it.
 */
import type { CoreV1Api, V1Pod, V1PodSpec } from '@kubernetes/client-node';
import { SandboxError } from '@vime/core';
import { sleep } from '@vime/core/utils';
import type { EffectiveLimits } from '../limits.js';
import type { SandboxEmitter } from '../types.js';
import { call, statusOf } from './client.js';

/** The container every sandbox pod runs its commands in. */
export const SANDBOX_CONTAINER = 'sandbox';

/** What a pod spec is built from. */
export interface PodSpecInput {
  image: string;
  workdir: string;
  env: Record<string, string> | undefined;
  limits: EffectiveLimits;
  /** Server-side lifetime: the kubelet kills the pod this long after it started (the leak backstop). */
  activeDeadlineSeconds: number | undefined;
  /** Fields merged over the generated spec (nodeSelector, tolerations, runtimeClassName, imagePullSecrets…). */
  overrides: Partial<V1PodSpec> | undefined;
}

/** The `ulimit` flags for the per-process limits Kubernetes has no field for (units as `sh`'s `ulimit` takes them). */
export function ulimitsOf(limits: EffectiveLimits): Array<readonly [string, number]> {
  const out: Array<readonly [string, number]> = [];
  if (limits.cpuSeconds !== undefined) out.push(['-t', limits.cpuSeconds]);
  if (limits.fileSizeBytes !== undefined) out.push(['-f', Math.ceil(limits.fileSizeBytes / 512)]);
  if (limits.openFiles !== undefined) out.push(['-n', limits.openFiles]);
  if (limits.addressSpaceBytes !== undefined) out.push(['-v', Math.floor(limits.addressSpaceBytes / 1024)]);
  return out;
}

/** Warn once per emitter that the pids limit is the node's (the kubelet's `podPidsLimit`), not the spec's. */
const warned = new WeakSet<SandboxEmitter>();
export function warnUnenforced(events: SandboxEmitter, limits: EffectiveLimits): void {
  if (limits.pids === undefined || warned.has(events)) return;
  warned.add(events);
  events.emit('warning', {
    message:
      'kubernetes: the pids limit is not set per pod (the kubelet sets one for every pod, --pod-max-pids / podPidsLimit)',
    code: 'limit_not_enforced',
    data: { limit: 'pids' },
  });
}

/** The pod spec of one sandbox. */
export function podSpec(input: PodSpecInput): V1PodSpec {
  const { limits } = input;
  const resources: Record<string, string> = {};
  if (limits.memoryBytes !== undefined) resources.memory = String(limits.memoryBytes);
  if (limits.cpus !== undefined) resources.cpu = `${Math.max(1, Math.round(limits.cpus * 1000))}m`;
  const tmp = limits.tmpBytes === undefined ? undefined : String(limits.tmpBytes);
  return {
    containers: [
      {
        name: SANDBOX_CONTAINER,
        image: input.image,
        // Any image's sleep (GNU, busybox) takes whole seconds; the pod lives until it is deleted.
        command: ['sleep', '2147483647'],
        workingDir: input.workdir,
        env: Object.entries({ HOME: input.workdir, LANG: 'C.UTF-8', ...input.env }).map(([name, value]) => ({
          name,
          value,
        })),
        resources: { limits: resources, requests: resources },
        securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
        volumeMounts: tmp === undefined ? [] : [{ name: 'tmp', mountPath: '/tmp' }],
      },
    ],
    volumes: tmp === undefined ? [] : [{ name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: tmp } }],
    restartPolicy: 'Never',
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 0,
    ...(input.activeDeadlineSeconds === undefined
      ? {}
      : { activeDeadlineSeconds: input.activeDeadlineSeconds }),
    ...input.overrides,
  };
}

/** Container waiting reasons that never resolve by waiting. */
const STUCK = new Set([
  'ErrImagePull',
  'ImagePullBackOff',
  'InvalidImageName',
  'CreateContainerConfigError',
  'CreateContainerError',
]);

/** Whether a pod's sandbox container runs (and the pod is not being deleted). */
export function isRunning(pod: V1Pod): boolean {
  const container = pod.status?.containerStatuses?.find((c) => c.name === SANDBOX_CONTAINER);
  return (
    pod.status?.phase === 'Running' &&
    container?.state?.running !== undefined &&
    !pod.metadata?.deletionTimestamp
  );
}

/**
 * Poll the pod until its sandbox container runs; a pod that failed, finished or is stuck (an image that
 * cannot be pulled) fails at once with the kubelet's reason.
 */
export async function waitRunning(
  core: CoreV1Api,
  namespace: string,
  name: string,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<V1Pod> {
  const deadline = Date.now() + timeoutMs;
  let delay = 100;
  for (;;) {
    signal?.throwIfAborted();
    const pod = await call(`reading pod ${namespace}/${name}`, () =>
      core.readNamespacedPod({ name, namespace }),
    );
    if (isRunning(pod)) return pod;
    const phase = pod.status?.phase;
    if (phase === 'Failed' || phase === 'Succeeded' || pod.metadata?.deletionTimestamp) {
      throw new SandboxError(
        `pod ${namespace}/${name} ended before it ran (${phase ?? 'deleting'}${pod.status?.reason ? `, ${pod.status.reason}` : ''}): ${pod.status?.message ?? ''}`,
        { code: 'pod_failed' },
      );
    }
    const waiting = pod.status?.containerStatuses?.find((c) => c.name === SANDBOX_CONTAINER)?.state?.waiting;
    if (waiting?.reason && STUCK.has(waiting.reason)) {
      throw new SandboxError(
        `pod ${namespace}/${name} cannot start: ${waiting.reason}: ${waiting.message ?? ''}; check the image name and the pull secrets (podSpec.imagePullSecrets)`,
        { code: 'pod_failed' },
      );
    }
    if (Date.now() + delay > deadline) {
      throw new SandboxError(
        `pod ${namespace}/${name} did not run within ${timeoutMs} ms (phase ${phase ?? 'unknown'}${waiting?.reason ? `, ${waiting.reason}` : ''}); raise startTimeoutMs, or check the cluster's capacity`,
        { code: 'pod_start_timeout' },
      );
    }
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 1000);
  }
}

/** Delete a pod now (no grace period); a pod already gone is fine. */
export async function deletePod(core: CoreV1Api, namespace: string, name: string): Promise<void> {
  try {
    await core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 });
  } catch (error) {
    if (statusOf(error) === 404) return;
    throw error;
  }
}
