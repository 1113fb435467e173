/**
 * What every hosted provider does the same way: validate the spec, label the sandbox with its run (the
 * vendor's metadata/labels), set the vendor's server-side lifetime (the leak backstop when this process
 * dies), create the work dir, track the create, and reap leftovers of a run by its label.
 */
import { ConfigError, SandboxError } from '@vime/core';
import type { Logger } from '@vime/core/utils';
import {
  CREATED_LABEL,
  type OpOptions,
  OWNER_LABEL,
  type ReapedSandbox,
  RUN_LABEL,
  SANDBOX_LABEL,
  type Sandbox,
  type SandboxEmitter,
  type SandboxProvider,
  type SandboxSpec,
} from '@vime/sandbox';
import {
  checkLifetime,
  forwardWarnings,
  isOwnerAlive,
  newSandboxId,
  resolveWorkdir,
  runOf,
  sandboxLabels,
  withTrackedCreate,
} from '@vime/sandbox/kit';
import { EventEmitter } from 'eventemitter3';
import type { HostedVendor } from './errors.js';
import { HostedSandbox, type HostedSession } from './sandbox.js';

/** Lifetime set at the vendor when a spec names none: the vendor ends the sandbox after it, whatever happens here. */
export const DEFAULT_HOSTED_LIFETIME_MS = 60 * 60_000;

/** What a vendor adapter is asked to create. */
export interface VendorCreate {
  image: string | undefined;
  env: Record<string, string>;
  /** The run, sandbox, owner and creation labels, as the vendor's metadata/labels. */
  labels: Record<string, string>;
  /** The server-side lifetime. */
  lifetimeMs: number;
}

/** A sandbox of the vendor's listing, as the reaper sees it. */
export interface VendorListed {
  vendorId: string;
  labels: Record<string, string>;
  /** Epoch milliseconds. */
  createdAt: number;
}

/** The vendor-specific part of a hosted provider. */
export interface VendorAdapter {
  readonly vendor: HostedVendor;
  create(request: VendorCreate): Promise<HostedSession>;
  /** Sandboxes carrying the run label (`run`), or every sandbox carrying a `vime.run` label. */
  list(run: string | undefined, signal: AbortSignal | undefined): Promise<VendorListed[]>;
  remove(vendorId: string, signal: AbortSignal | undefined): Promise<void>;
}

/** Options every hosted provider takes. */
export interface HostedProviderOptions {
  /** Server-side lifetime when a spec names no `lifetimeMs` (default one hour). */
  defaultLifetimeMs?: number | undefined;
  events?: SandboxEmitter | undefined;
  logger?: Logger | undefined;
  /** Terminate live sandboxes on SIGINT/SIGTERM/SIGHUP and exit (default true). */
  handleSignals?: boolean | undefined;
}

/** Options of a hosted provider's `reapOrphans`. */
export interface HostedReapOptions {
  /** Only sandboxes labelled with this run (`vime.run`). */
  run?: string | undefined;
  /** Only sandboxes created longer ago than this. */
  olderThanMs?: number | undefined;
  /** Also remove sandboxes whose creating process is still running (default false). */
  includeLive?: boolean | undefined;
  dryRun?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/** What a hosted `reapOrphans` removed, left alone (live runs) or failed to remove. */
export interface HostedReapReport {
  removed: ReapedSandbox[];
  skippedLive: number;
  errors: Array<{ id: string; error: unknown }>;
}

/** A hosted provider: a `SandboxProvider` that can also reap a run's leftovers at the vendor. */
export interface HostedProvider extends SandboxProvider {
  /** Remove sandboxes a crashed run left at the vendor, by its run label and/or age. */
  reapOrphans(selector: string | HostedReapOptions): Promise<HostedReapReport>;
}

function checkSpec(spec: SandboxSpec, vendor: HostedVendor): void {
  if (spec.proxy !== undefined) {
    throw new ConfigError(
      `spec.proxy: a ${vendor} sandbox runs at the vendor and cannot reach a host unix socket; serve the capture proxy on an address the sandbox can reach instead, or use the bubblewrap or docker provider`,
    );
  }
  if (spec.readOnlyBinds !== undefined && spec.readOnlyBinds.length > 0) {
    throw new ConfigError(
      `spec.readOnlyBinds: a ${vendor} sandbox cannot mount host paths; bake the files into the ${vendor} template/image, or copy them in with sandbox.copyIn`,
    );
  }
}

/** A `SandboxProvider` over one vendor adapter. */
export function hostedProvider(adapter: VendorAdapter, options: HostedProviderOptions = {}): HostedProvider {
  const vendor = adapter.vendor;
  const events = options.events ?? (new EventEmitter() as SandboxEmitter);
  forwardWarnings(events, options.logger);
  const handleSignals = options.handleSignals !== false;
  const defaultLifetimeMs = options.defaultLifetimeMs ?? DEFAULT_HOSTED_LIFETIME_MS;
  checkLifetime(defaultLifetimeMs, `${vendor}Provider defaultLifetimeMs`);
  let warnedLimits = false;

  const tracked = withTrackedCreate(
    {
      name: vendor,
      events,
      async create(spec: SandboxSpec, op: OpOptions = {}): Promise<Sandbox> {
        const { signal } = op;
        signal?.throwIfAborted();
        const started = performance.now();
        const workdir = resolveWorkdir(spec?.workdir);
        checkLifetime(spec.lifetimeMs);
        checkSpec(spec, vendor);
        if (spec.limits !== undefined && spec.limits !== 'none' && !warnedLimits) {
          warnedLimits = true;
          events.emit('warning', {
            message: `${vendor}: resource limits come from the ${vendor} template/image and plan, not from spec.limits`,
            code: 'limit_not_enforced',
            data: { limit: 'all' },
          });
        }
        const id = newSandboxId(runOf(spec.labels));
        const labels = sandboxLabels(id, spec.labels);
        const session = await adapter.create({
          image: spec.image,
          env: { HOME: workdir, ...spec.env },
          labels,
          lifetimeMs: spec.lifetimeMs ?? defaultLifetimeMs,
        });
        try {
          signal?.throwIfAborted();
          let err = '';
          const code = await session.run(['mkdir', '-p', '--', workdir], {
            cwd: '/',
            env: {},
            signal: signal ?? AbortSignal.timeout(120_000),
            onStdout: () => {},
            onStderr: (c) => {
              err += Buffer.from(c).toString();
            },
          });
          if (code !== 0)
            throw new SandboxError(`${vendor}: cannot create work dir ${workdir}: ${err.trim()}`);
        } catch (error) {
          await session.kill().catch(() => {});
          throw error;
        }
        const sandbox = new HostedSandbox({
          id,
          vendor,
          session,
          workdir,
          labels,
          events,
          handleSignals,
          lifetimeMs: spec.lifetimeMs,
        });
        events.emit('create', { id, provider: vendor, labels, durationMs: performance.now() - started });
        return sandbox;
      },
    },
    handleSignals,
  );

  return {
    ...tracked,
    reapOrphans: (selector) =>
      reapVendor(adapter, typeof selector === 'string' ? { run: selector } : selector, events),
  };
}

async function reapVendor(
  adapter: VendorAdapter,
  options: HostedReapOptions,
  events: SandboxEmitter,
): Promise<HostedReapReport> {
  if (options.run === undefined && options.olderThanMs === undefined) {
    throw new ConfigError(
      `${adapter.vendor} reapOrphans needs \`run\` (a vime.run label) or \`olderThanMs\`; neither was given`,
    );
  }
  if (options.olderThanMs !== undefined && !(options.olderThanMs >= 0)) {
    throw new ConfigError(`reapOrphans olderThanMs must be >= 0, got ${JSON.stringify(options.olderThanMs)}`);
  }
  const report: HostedReapReport = { removed: [], skippedLive: 0, errors: [] };
  for (const listed of await adapter.list(options.run, options.signal)) {
    const labels = listed.labels;
    if (labels[RUN_LABEL] === undefined) continue;
    if (options.run !== undefined && labels[RUN_LABEL] !== options.run) continue;
    const createdAt = Number(labels[CREATED_LABEL] ?? listed.createdAt);
    const age = Date.now() - createdAt;
    if (options.olderThanMs !== undefined && !(age > options.olderThanMs)) continue;
    if (!options.includeLive && isOwnerAlive(labels[OWNER_LABEL])) {
      report.skippedLive++;
      continue;
    }
    const id = labels[SANDBOX_LABEL] ?? listed.vendorId;
    if (!options.dryRun) {
      try {
        await adapter.remove(listed.vendorId, options.signal);
      } catch (error) {
        report.errors.push({ id, error });
        continue;
      }
    }
    const reasons = [
      ...(options.run === undefined ? [] : [`run ${options.run}`]),
      ...(options.olderThanMs === undefined ? [] : [`age ${Math.round(age / 1000)} s`]),
    ];
    const reaped = { id, provider: adapter.vendor, labels, reason: reasons.join(', ') };
    report.removed.push(reaped);
    events.emit('leak-reaped', reaped);
  }
  return report;
}
