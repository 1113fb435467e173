/**
 * `kubernetes`: one pod per sandbox through the Kubernetes API with the official client
 * (`@kubernetes/client-node`), or, with `agentSandbox`, a `SandboxClaim` on an agent-sandbox warm pool
 * per image. Commands run through the `exec` subresource; files move as tar over exec. Every pod carries
 * the run's labels and a server-side lifetime (`activeDeadlineSeconds`, or the claim's `shutdownTime`),
 * so a crashed run's pods end on their own; `reapOrphans({ run, kubernetes })` removes them sooner.
 */
import type { V1PodSpec } from '@kubernetes/client-node';
import { ConfigError } from '@vime/core';
import type { Logger } from '@vime/core/utils';
import { EventEmitter } from 'eventemitter3';
import {
  forwardWarnings,
  newSandboxId,
  RUN_LABEL,
  runOf,
  sandboxLabels,
  withTrackedCreate,
} from '../lifecycle.js';
import { checkLifetime, resolveLimits, resolveWorkdir } from '../limits.js';
import type { OpOptions, Sandbox, SandboxEmitter, SandboxProvider, SandboxSpec } from '../types.js';
import {
  type AgentSandboxOptions,
  type ClaimedPod,
  createClaim,
  deleteClaim,
  WarmPools,
  waitClaimed,
} from './agent-sandbox.js';
import { call, type KubeClients, type KubeConnection, kubeClients, objectMeta } from './client.js';
import {
  deletePod,
  isRunning,
  podSpec,
  SANDBOX_CONTAINER,
  ulimitsOf,
  waitRunning,
  warnUnenforced,
} from './pods.js';
import { KubernetesSandbox } from './sandbox.js';

/** Server-side lifetime of a pod whose spec sets no `lifetimeMs` (6 hours): the leak backstop. */
export const DEFAULT_ACTIVE_DEADLINE_SECONDS = 6 * 3600;

/** Options of `kubernetesProvider`. */
export interface KubernetesProviderOptions extends KubeConnection {
  /** Image when the spec names none (required then: a cluster has no default). */
  defaultImage?: string | undefined;
  /** Fields merged over each generated pod spec (nodeSelector, tolerations, runtimeClassName, imagePullSecrets…). */
  podSpec?: Partial<V1PodSpec> | undefined;
  /**
   * Server-side lifetime of pods whose spec sets no `lifetimeMs`, seconds (default 6 hours). With
   * `lifetimeMs` the pod's `activeDeadlineSeconds` is that lifetime, rounded up.
   */
  activeDeadlineSeconds?: number | undefined;
  /** How long a pod (or claim) may take to run, ms (default 5 minutes: an image pull). */
  startTimeoutMs?: number | undefined;
  /** Claim sandboxes from agent-sandbox warm pools (its CRDs and controller installed) instead of creating pods. */
  agentSandbox?: AgentSandboxOptions | true | undefined;
  events?: SandboxEmitter | undefined;
  logger?: Logger | undefined;
  /** Terminate live sandboxes on SIGINT/SIGTERM/SIGHUP and exit (default true). */
  handleSignals?: boolean | undefined;
}

function checkSeconds(value: unknown, field: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new ConfigError(
      `kubernetesProvider ${field} must be a whole number >= 1, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/** Sandboxes as Kubernetes pods (or agent-sandbox claims), through the official client. */
export function kubernetesProvider(options: KubernetesProviderOptions = {}): SandboxProvider {
  const events = options.events ?? (new EventEmitter() as SandboxEmitter);
  forwardWarnings(events, options.logger);
  const clients = kubeClients(options);
  const deadline =
    checkSeconds(options.activeDeadlineSeconds, 'activeDeadlineSeconds') ?? DEFAULT_ACTIVE_DEADLINE_SECONDS;
  const startTimeoutMs = checkSeconds(options.startTimeoutMs, 'startTimeoutMs') ?? 300_000;
  const pools = options.agentSandbox
    ? new WarmPools(clients, options.agentSandbox === true ? {} : options.agentSandbox)
    : undefined;
  const handleSignals = options.handleSignals ?? true;

  return withTrackedCreate(
    {
      name: 'kubernetes',
      events,
      async create(spec: SandboxSpec, op: OpOptions = {}): Promise<Sandbox> {
        const { signal } = op;
        signal?.throwIfAborted();
        const started = performance.now();
        const workdir = resolveWorkdir(spec?.workdir);
        checkLifetime(spec.lifetimeMs);
        const limits = resolveLimits(spec.limits);
        if (spec.proxy || spec.readOnlyBinds?.length) {
          throw new ConfigError(
            'kubernetesProvider supports neither spec.proxy nor spec.readOnlyBinds (a pod cannot mount this host); reach the capture proxy through a Service, or use the bubblewrap or docker provider',
          );
        }
        const image = spec.image ?? options.defaultImage;
        if (!image) {
          throw new ConfigError(
            'kubernetesProvider needs an image: set spec.image, or { defaultImage } on the provider (e.g. python:3.12-slim)',
          );
        }
        const run = runOf(spec.labels);
        const id = newSandboxId(run);
        const labels = sandboxLabels(id, spec.labels);
        if (spec.lifetimeMs !== undefined) labels['vime.lifetime-ms'] = String(spec.lifetimeMs);
        const meta = objectMeta(labels);
        if (meta.labels[RUN_LABEL] !== run) {
          throw new ConfigError(
            `spec.labels["${RUN_LABEL}"] = ${JSON.stringify(run)} is not a valid Kubernetes label value (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends); reapOrphans selects pods by it`,
          );
        }
        warnUnenforced(events, limits);
        const lifetimeSeconds = spec.lifetimeMs === undefined ? undefined : Math.ceil(spec.lifetimeMs / 1000);
        const input = { image, workdir, env: spec.env, limits, overrides: options.podSpec };
        const { pod, release } = pools
          ? await claimPod(
              clients,
              pools,
              id,
              meta,
              { ...input, activeDeadlineSeconds: undefined },
              spec,
              events,
              {
                startTimeoutMs,
                signal,
                started,
              },
            )
          : await createPod(
              clients,
              id,
              meta,
              podSpec({ ...input, activeDeadlineSeconds: lifetimeSeconds ?? deadline }),
              {
                startTimeoutMs,
                signal,
              },
            );
        const sandbox = new KubernetesSandbox({
          id,
          kc: clients.kc,
          namespace: clients.namespace,
          pod,
          container: SANDBOX_CONTAINER,
          workdir,
          labels,
          ulimits: ulimitsOf(limits),
          events,
          handleSignals,
          lifetimeMs: spec.lifetimeMs,
          running: async () =>
            isRunning(
              await call(`reading pod ${pod}`, () =>
                clients.core.readNamespacedPod({ name: pod, namespace: clients.namespace }),
              ),
            ),
          release,
        });
        events.emit('create', {
          id,
          provider: 'kubernetes',
          labels,
          durationMs: performance.now() - started,
        });
        return sandbox;
      },
    },
    handleSignals,
  );
}

type Meta = ReturnType<typeof objectMeta>;
interface Backing {
  pod: string;
  release: () => Promise<void>;
}

/** Create the sandbox's pod and wait for it to run; a pod that does not is deleted. */
async function createPod(
  clients: KubeClients,
  id: string,
  meta: Meta,
  spec: V1PodSpec,
  options: { startTimeoutMs: number; signal: AbortSignal | undefined },
): Promise<Backing> {
  const name = `vime-${id}`;
  const { core, namespace } = clients;
  // Not aborted midway: the server may create a pod whose request went away; it must be known to be deleted.
  await call(`creating pod ${namespace}/${name}`, () =>
    core.createNamespacedPod({
      namespace,
      body: { apiVersion: 'v1', kind: 'Pod', metadata: { name, ...meta }, spec },
    }),
  );
  const release = () => call(`deleting pod ${namespace}/${name}`, () => deletePod(core, namespace, name));
  try {
    await waitRunning(core, namespace, name, options.startTimeoutMs, options.signal);
  } catch (error) {
    await release().catch(() => {});
    throw error;
  }
  return { pod: name, release };
}

/** Claim a sandbox from the pool of its pod spec and wait for its pod; a claim that does not bind is deleted. */
async function claimPod(
  clients: KubeClients,
  pools: WarmPools,
  id: string,
  meta: Meta,
  input: Parameters<typeof podSpec>[0],
  spec: SandboxSpec,
  events: SandboxEmitter,
  options: { startTimeoutMs: number; signal: AbortSignal | undefined; started: number },
): Promise<Backing> {
  // Pools outlive runs (the next run claims from them): labelled as Vime's, not as one run's.
  const pool = await pools.poolFor(input.image, podSpec(input), { 'app.kubernetes.io/managed-by': 'vime' });
  const claim = `vime-${id}`;
  const shutdownAt = spec.lifetimeMs === undefined ? undefined : new Date(Date.now() + spec.lifetimeMs);
  await createClaim(clients, claim, pool, meta, shutdownAt);
  const release = () =>
    call(`deleting SandboxClaim ${clients.namespace}/${claim}`, () => deleteClaim(clients, claim));
  let claimed: ClaimedPod;
  try {
    claimed = await waitClaimed(clients, claim, options.startTimeoutMs, options.signal);
    await waitRunning(clients.core, clients.namespace, claimed.pod, options.startTimeoutMs, options.signal);
  } catch (error) {
    await release().catch(() => {});
    throw error;
  }
  events.emit('claim', { id, pool, warm: claimed.warm, latencyMs: performance.now() - options.started });
  return { pod: claimed.pod, release };
}
