/**
 * The Kubernetes part of `reapOrphans`: agent-sandbox claims and pods carrying the run label, selected on
 * the server by label, then by age and by whether their creating process is gone.
 */
import { CREATED_LABEL, isOwnerAlive, OWNER_LABEL, RUN_LABEL, SANDBOX_LABEL } from '../lifecycle.js';
import { deleteClaim, listClaims } from './agent-sandbox.js';
import { call, type KubeConnection, kubeClients } from './client.js';
import { deletePod } from './pods.js';

/** One object the reaper may remove: its kind, name and the sandbox's labels (from its annotations). */
interface Candidate {
  kind: 'claim' | 'pod';
  name: string;
  labels: Record<string, string>;
  createdAt: number;
}

export interface KubeReapFilter {
  run?: string | undefined;
  includeLive?: boolean | undefined;
  dryRun?: boolean | undefined;
  /** Whether labels and age select a sandbox, and why. */
  matches: (labels: Record<string, string>, createdAt: number) => { match: boolean; reason: string };
}

/** What the sweep found: removed, left alone as live, failed. */
export interface KubeReapResult {
  removed: Array<{ id: string; labels: Record<string, string>; reason: string }>;
  skippedLive: number;
  errors: Array<{ id: string; error: unknown }>;
}

function candidate(
  kind: Candidate['kind'],
  item: {
    metadata?: { name?: string; annotations?: Record<string, string>; creationTimestamp?: string | Date };
  },
): Candidate | undefined {
  const name = item.metadata?.name;
  if (!name) return undefined;
  const labels = item.metadata?.annotations ?? {};
  const created = Number(labels[CREATED_LABEL] ?? Date.parse(String(item.metadata?.creationTimestamp ?? '')));
  return { kind, name, labels, createdAt: Number.isFinite(created) ? created : 0 };
}

/** Remove the run's claims first (their pods go with them), then its pods. */
export async function reapKubernetes(
  connection: KubeConnection,
  filter: KubeReapFilter,
): Promise<KubeReapResult> {
  const clients = kubeClients(connection);
  const selector = filter.run === undefined ? RUN_LABEL : `${RUN_LABEL}=${filter.run}`;
  const result: KubeReapResult = { removed: [], skippedLive: 0, errors: [] };
  const claims = (await call('listing SandboxClaims', () => listClaims(clients, selector))).map((c) =>
    candidate('claim', c),
  );
  const claimed = new Set(claims.map((c) => c?.labels[SANDBOX_LABEL]));
  const pods = await call('listing pods', () =>
    clients.core.listNamespacedPod({ namespace: clients.namespace, labelSelector: selector }),
  );
  const podCandidates = pods.items
    .map((p) => candidate('pod', p))
    // A claimed sandbox's pod carries the same labels; deleting its claim deletes it.
    .filter((c) => c && !claimed.has(c.labels[SANDBOX_LABEL]));
  for (const c of [...claims, ...podCandidates]) {
    if (!c) continue;
    const { match, reason } = filter.matches(c.labels, c.createdAt);
    if (!match) continue;
    if (!filter.includeLive && isOwnerAlive(c.labels[OWNER_LABEL])) {
      result.skippedLive++;
      continue;
    }
    const id = c.labels[SANDBOX_LABEL] ?? c.name;
    if (!filter.dryRun) {
      try {
        if (c.kind === 'claim')
          await call(`deleting SandboxClaim ${c.name}`, () => deleteClaim(clients, c.name));
        else await call(`deleting pod ${c.name}`, () => deletePod(clients.core, clients.namespace, c.name));
      } catch (error) {
        result.errors.push({ id, error });
        continue;
      }
    }
    result.removed.push({
      id,
      labels: c.labels,
      reason: `${reason}, ${c.kind} ${clients.namespace}/${c.name}`,
    });
  }
  return result;
}
