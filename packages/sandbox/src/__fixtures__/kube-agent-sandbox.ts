// A STAND-IN for agent-sandbox's CRDs and controllers (kubernetes-sigs/agent-sandbox), inside the
// stand-in API server, for this package's tests only. It stores and validates the v1beta1 objects
// (required fields as their CRD schemas mark them: extensions/api/v1beta1/sandboxclaim_types.go @
// 07b6d8df32109dff2511a678e83b39104cce5c3a, sandboxwarmpool_types.go @ 1197eaee96c4646bbe83fc78298e7337b6ee8254,
// sandboxtemplate_types.go @ 0296effbeb56ef57bd588d773b232b3c0025904d, api/v1beta1/sandbox_types.go @
// 040bc60f45bceb4ad347b032b7b0de4e4bb3656e) and reconciles them as the controllers do: a warm pool keeps
// `replicas` Sandboxes (each with its pod) of its template; a claim adopts a warm sandbox whose pod runs
// (launch-type `warm`) or cold-starts one (`cold`), puts its additionalPodMetadata labels on the pod, and
// reports `status.sandbox.name` and a Ready condition; deleting a claim deletes its sandbox and pod; a
// claim's `lifecycle.shutdownTime` ends it by its `shutdownPolicy`.
import type { StandinApiServer } from './kube-apiserver.js';
import { type KubeObject, randomSuffix, StatusError, selects, validateMeta } from './kube-objects.js';

const EXT = 'extensions.agents.x-k8s.io/v1beta1';
const CORE = 'agents.x-k8s.io/v1beta1';
const TEMPLATES = `${EXT}/sandboxtemplates`;
const POOLS = `${EXT}/sandboxwarmpools`;
const CLAIMS = `${EXT}/sandboxclaims`;
const SANDBOXES = `${CORE}/sandboxes`;
const POOL_LABEL = 'agents.x-k8s.io/warm-pool-sandbox';
const LAUNCH_LABEL = 'agents.x-k8s.io/launch-type';
const POD_NAME = 'agents.x-k8s.io/pod-name';
const CLAIM_UID = 'agents.x-k8s.io/claim-uid';
const SANDBOX_NAME = 'agents.x-k8s.io/sandbox-name';

/** The resources the stand-in serves: `group/version/plural` → kind. */
export const CUSTOM_RESOURCES: Record<string, string> = {
  [TEMPLATES]: 'SandboxTemplate',
  [POOLS]: 'SandboxWarmPool',
  [CLAIMS]: 'SandboxClaim',
  [SANDBOXES]: 'Sandbox',
};

function invalid(kind: string, name: string, field: string, what = 'Required value'): StatusError {
  return new StatusError(422, 'Invalid', `${kind}.${kind === 'Sandbox' ? 'agents' : 'extensions.agents'}.x-k8s.io "${name}" is invalid: ${field}: ${what}`);
}

/** The CRD schemas' required fields, enums and defaults. */
function validate(kind: string, body: KubeObject): void {
  validateMeta(kind, body.metadata);
  const name = body.metadata.name;
  const spec = body.spec;
  if (typeof spec !== 'object' || spec === null) throw invalid(kind, name, 'spec');
  if (kind === 'SandboxTemplate' || kind === 'Sandbox') {
    if (!Array.isArray(spec.podTemplate?.spec?.containers)) throw invalid(kind, name, 'spec.podTemplate.spec.containers');
  }
  if (kind === 'SandboxWarmPool') {
    if (typeof spec.sandboxTemplateRef?.name !== 'string') throw invalid(kind, name, 'spec.sandboxTemplateRef.name');
    spec.replicas ??= 1;
    if (!Number.isInteger(spec.replicas) || spec.replicas < 0) throw invalid(kind, name, 'spec.replicas', 'must be >= 0');
  }
  if (kind === 'SandboxClaim') {
    if (typeof spec.warmPoolRef?.name !== 'string') throw invalid(kind, name, 'spec.warmPoolRef.name');
    const policy = spec.lifecycle?.shutdownPolicy;
    if (spec.lifecycle) spec.lifecycle.shutdownPolicy ??= 'Retain';
    if (policy !== undefined && !['Delete', 'DeleteForeground', 'Retain'].includes(policy)) {
      throw invalid(kind, name, 'spec.lifecycle.shutdownPolicy', `Unsupported value: "${policy}"`);
    }
  }
}

export class AgentSandboxController {
  readonly #api: StandinApiServer;
  readonly #timers = new Set<NodeJS.Timeout>();
  #busy = false;
  #again = false;

  constructor(api: StandinApiServer) {
    this.#api = api;
  }

  close(): void {
    for (const t of this.#timers) clearTimeout(t);
  }

  #list(resource: string, ns: string): KubeObject[] {
    const prefix = `${resource}/${ns}/`;
    return [...this.#api.custom.entries()].filter(([k]) => k.startsWith(prefix)).map(([, v]) => v);
  }

  #get(resource: string, ns: string, name: string): KubeObject | undefined {
    return this.#api.custom.get(`${resource}/${ns}/${name}`);
  }

  #put(resource: string, object: KubeObject): void {
    object.metadata.resourceVersion = this.#api.nextVersion();
    this.#api.custom.set(`${resource}/${object.metadata.namespace}/${object.metadata.name}`, object);
  }

  route(method: string, resource: string, kind: string, ns: string, name: string | undefined, url: URL, body: KubeObject | undefined) {
    const [group, version] = [resource.split('/')[0], resource.split('/')[1]];
    if (name === undefined && method === 'POST') {
      const object = { ...(body ?? {}), apiVersion: `${group}/${version}`, kind } as KubeObject;
      validate(kind, object);
      if (this.#get(resource, ns, object.metadata.name)) {
        throw new StatusError(409, 'AlreadyExists', `${resource.split('/')[2]}.${group} "${object.metadata.name}" already exists`);
      }
      object.metadata = { ...object.metadata, namespace: ns, uid: crypto.randomUUID(), creationTimestamp: new Date().toISOString() };
      this.#put(resource, object);
      const shutdown = Date.parse(object.spec?.lifecycle?.shutdownTime ?? '');
      if (kind === 'SandboxClaim' && Number.isFinite(shutdown)) {
        const timer = setTimeout(() => this.reconcile(), Math.max(0, shutdown - Date.now()) + 10);
        timer.unref();
        this.#timers.add(timer);
      }
      this.reconcile();
      return { status: 201, object };
    }
    if (name === undefined && method === 'GET') {
      const items = this.#list(resource, ns).filter((o) => selects(url.searchParams.get('labelSelector'), o.metadata.labels));
      return { status: 200, object: { apiVersion: `${group}/${version}`, kind: `${kind}List`, metadata: {}, items } };
    }
    const object = name === undefined ? undefined : this.#get(resource, ns, name);
    if (!object) throw new StatusError(404, 'NotFound', `${resource.split('/')[2]}.${group} "${name}" not found`);
    if (method === 'GET') return { status: 200, object };
    if (method === 'DELETE') {
      this.#delete(resource, object);
      this.reconcile();
      return { status: 200, object: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', details: { name, kind } } };
    }
    throw new StatusError(405, 'MethodNotAllowed', `${method} is not supported here`);
  }

  /** Delete an object and, as the garbage collector does, what it owns. */
  #delete(resource: string, object: KubeObject): void {
    const { namespace: ns, name, uid } = object.metadata;
    this.#api.custom.delete(`${resource}/${ns}/${name}`);
    if (resource === SANDBOXES) {
      const pod = object.metadata.annotations?.[POD_NAME] ?? name;
      if (this.#api.pods.has(`${ns}/${pod}`)) this.#api.deletePod(`${ns}/${pod}`);
      return;
    }
    for (const s of this.#list(SANDBOXES, ns)) {
      const owned = s.metadata.ownerReferences?.some((r: KubeObject) => r.uid === uid);
      const pooled = resource === POOLS && s.metadata.labels?.[POOL_LABEL] === name;
      if (owned || pooled) this.#delete(SANDBOXES, s);
    }
  }

  #podOf(sandbox: KubeObject): KubeObject | undefined {
    const { namespace: ns, name } = sandbox.metadata;
    return this.#api.pods.get(`${ns}/${sandbox.metadata.annotations?.[POD_NAME] ?? name}`)?.object;
  }

  /** A Sandbox and its pod from a template: in a pool (warm) or for a claim (cold). */
  #newSandbox(ns: string, template: KubeObject, labels: Record<string, string>, owner?: KubeObject): KubeObject {
    const name = `${template.metadata.name.slice(0, 50)}-${randomSuffix()}`;
    const podTemplate = template.spec.podTemplate;
    const sandbox: KubeObject = {
      apiVersion: CORE,
      kind: 'Sandbox',
      metadata: {
        name,
        namespace: ns,
        uid: crypto.randomUUID(),
        creationTimestamp: new Date().toISOString(),
        labels,
        annotations: { [POD_NAME]: name },
        ...(owner ? { ownerReferences: [{ apiVersion: EXT, kind: 'SandboxClaim', name: owner.metadata.name, uid: owner.metadata.uid }] } : {}),
      },
      spec: { podTemplate },
    };
    this.#put(SANDBOXES, sandbox);
    const podLabels = { ...podTemplate.metadata?.labels, ...(owner ? this.#claimPodLabels(owner) : {}) };
    this.#api.createPod(ns, { metadata: { name, labels: podLabels }, spec: structuredClone(podTemplate.spec) });
    return sandbox;
  }

  #claimPodLabels(claim: KubeObject): Record<string, string> {
    return { ...claim.spec.additionalPodMetadata?.labels, [CLAIM_UID]: claim.metadata.uid };
  }

  /** Bring every pool and claim to its desired state (re-entrant calls run once more after). */
  reconcile(): void {
    if (this.#busy) {
      this.#again = true;
      return;
    }
    this.#busy = true;
    try {
      do {
        this.#again = false;
        const namespaces = new Set([...this.#api.custom.values()].map((o) => o.metadata.namespace as string));
        for (const ns of namespaces) {
          for (const claim of this.#list(CLAIMS, ns)) this.#claim(ns, claim);
          for (const pool of this.#list(POOLS, ns)) this.#pool(ns, pool);
        }
      } while (this.#again);
    } finally {
      this.#busy = false;
    }
  }

  #claim(ns: string, claim: KubeObject): void {
    const shutdown = Date.parse(claim.spec.lifecycle?.shutdownTime ?? '');
    const bound = claim.status?.sandbox?.name ? this.#get(SANDBOXES, ns, claim.status.sandbox.name) : undefined;
    if (Number.isFinite(shutdown) && Date.now() >= shutdown) {
      if (claim.spec.lifecycle.shutdownPolicy === 'Retain') {
        if (bound) this.#delete(SANDBOXES, bound);
        claim.status = { ...claim.status, conditions: [{ type: 'Ready', status: 'False', reason: 'ClaimExpired' }] };
      } else this.#delete(CLAIMS, claim);
      return;
    }
    let sandbox = bound;
    if (!claim.status?.sandbox?.name) {
      const pool = this.#get(POOLS, ns, claim.spec.warmPoolRef.name);
      const template = pool && this.#get(TEMPLATES, ns, pool.spec.sandboxTemplateRef.name);
      if (!template) {
        claim.status = { conditions: [{ type: 'Ready', status: 'False', reason: 'WarmPoolNotFound', message: `warm pool "${claim.spec.warmPoolRef.name}" or its template not found` }] };
        return;
      }
      sandbox = this.#list(SANDBOXES, ns).find(
        (s) => s.metadata.labels?.[POOL_LABEL] === pool.metadata.name && this.#podOf(s)?.status?.phase === 'Running',
      );
      if (sandbox) {
        // Adoption: the sandbox leaves the pool, the claim owns it, its pod gets the claim's labels.
        delete sandbox.metadata.labels[POOL_LABEL];
        sandbox.metadata.ownerReferences = [{ apiVersion: EXT, kind: 'SandboxClaim', name: claim.metadata.name, uid: claim.metadata.uid }];
        const pod = this.#podOf(sandbox);
        if (pod) pod.metadata.labels = { ...pod.metadata.labels, ...this.#claimPodLabels(claim) };
        this.#put(SANDBOXES, sandbox);
      } else {
        sandbox = this.#newSandbox(ns, template, { [LAUNCH_LABEL]: 'cold' }, claim);
      }
      claim.metadata.annotations = { ...claim.metadata.annotations, [SANDBOX_NAME]: sandbox.metadata.name };
    }
    const running = sandbox ? this.#podOf(sandbox)?.status?.phase === 'Running' : false;
    claim.status = {
      sandbox: { name: sandbox?.metadata.name },
      conditions: [{ type: 'Ready', status: running ? 'True' : 'False', reason: running ? 'SandboxReady' : 'SandboxNotReady' }],
    };
  }

  #pool(ns: string, pool: KubeObject): void {
    const template = this.#get(TEMPLATES, ns, pool.spec.sandboxTemplateRef.name);
    const members = this.#list(SANDBOXES, ns).filter((s) => s.metadata.labels?.[POOL_LABEL] === pool.metadata.name);
    if (template) {
      for (let n = members.length; n < pool.spec.replicas; n++) {
        members.push(this.#newSandbox(ns, template, { [POOL_LABEL]: pool.metadata.name, [LAUNCH_LABEL]: 'warm' }));
      }
    }
    while (members.length > pool.spec.replicas) this.#delete(SANDBOXES, members.pop()!);
    pool.status = {
      replicas: members.length,
      readyReplicas: members.filter((s) => this.#podOf(s)?.status?.phase === 'Running').length,
      selector: `${POOL_LABEL}=${pool.metadata.name}`,
    };
  }
}
