/**
 * Leak-proofing shared by every provider: run and owner labels, the registry of live sandboxes, process
 * exit/signal handlers that terminate them, and per-sandbox lifetime timers.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { SandboxError } from '@vime/core';
import type { Logger } from '@vime/core/utils';
import type { SandboxEmitter, SandboxProvider, TerminateReason } from './types.js';

/** Label naming the run that created a sandbox; `reapOrphans({ run })` matches it. */
export const RUN_LABEL = 'vime.run';
/** Label with the sandbox id. */
export const SANDBOX_LABEL = 'vime.sandbox';
/** Label `<host>:<pid>:<start ticks>` of the creating process, so a reaper can tell whether it is still alive. */
export const OWNER_LABEL = 'vime.owner';
/** Label with the creation time in epoch milliseconds. */
export const CREATED_LABEL = 'vime.created';

let processRunId: string | undefined;

/** This process's run id (stable for its lifetime); used when a spec carries no `vime.run` label. */
export function defaultRunId(): string {
  processRunId ??= `run-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
  return processRunId;
}

/** A short hash of a run id: every sandbox id (and so its folder, cgroups and container) carries it. */
export function runTag(run: string): string {
  return createHash('sha256').update(run).digest('hex').slice(0, 8);
}

/**
 * A new sandbox id, `sbx-<run tag>-<random>`: a reaper can tell a sandbox's run from its name alone,
 * even where its metadata is torn or its folder is gone (an orphan cgroup).
 */
export function newSandboxId(run: string): string {
  return `sbx-${runTag(run)}-${randomBytes(6).toString('hex')}`;
}

/** Whether a sandbox id (or a name containing one) belongs to `run`. */
export function idOfRun(name: string, run: string): boolean {
  return name.includes(`sbx-${runTag(run)}-`);
}

/** The run label a spec's labels give (or this process's default run id). */
export function runOf(labels: Record<string, string> | undefined): string {
  return labels?.[RUN_LABEL] ?? defaultRunId();
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat), or undefined. */
export function processStartTicks(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces and parentheses; fields resume after the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

export function ownerLabel(pid = process.pid): string {
  return `${hostname()}:${pid}:${processStartTicks(pid) ?? '?'}`;
}

/**
 * Whether the process named by an owner label is still running. Unknown hosts count as alive: a reaper on
 * another machine cannot know, so it leaves those sandboxes to `olderThanMs`.
 */
export function isOwnerAlive(owner: string | undefined): boolean {
  if (!owner) return false;
  const [host, pid, ticks] = owner.split(':');
  if (host !== hostname()) return true;
  const current = processStartTicks(Number(pid));
  return current !== undefined && (ticks === '?' || current === ticks);
}

/** The labels stamped on everything a sandbox creates. */
export function sandboxLabels(
  id: string,
  labels: Record<string, string> | undefined,
): Record<string, string> {
  return {
    ...labels,
    [RUN_LABEL]: runOf(labels),
    [SANDBOX_LABEL]: id,
    [OWNER_LABEL]: ownerLabel(),
    [CREATED_LABEL]: String(Date.now()),
  };
}

/** What the registry needs from a live sandbox. */
export interface Terminable {
  readonly id: string;
  /** Terminate, recording why (the registry passes the signal, `exit` or `lifetime`). */
  terminateWith(reason: TerminateReason): Promise<void>;
}

const live = new Set<Terminable>();
/** Synchronous cleanups for `process.on('exit')`, where nothing async runs: one per resource owner. */
const exitHooks = new Set<() => void>();
let handlersInstalled = false;
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
/** Aborted by the first SIGINT/SIGTERM/SIGHUP: creates in flight stop, and new ones are refused. */
const shutdown = new AbortController();

/** Every sandbox still alive in this process. */
export function liveSandboxCount(): number {
  return live.size;
}

/**
 * Run `cleanup` synchronously if this process exits before the returned function is called. Register it
 * before the first resource exists (a folder, a container name), so an exit at any step leaves nothing.
 */
export function onProcessExit(cleanup: () => void): () => void {
  exitHooks.add(cleanup);
  return () => exitHooks.delete(cleanup);
}

const creating = new Set<Promise<unknown>>();

/**
 * Track a create in flight, so that terminating everything also catches sandboxes whose create was
 * still running (a signal mid-create would otherwise leave them behind).
 */
export function trackCreate<T>(create: Promise<T>, handleSignals = true): Promise<T> {
  if (handleSignals) installHandlers();
  creating.add(create);
  const done = () => creating.delete(create);
  create.then(done, done);
  return create;
}

/** Terminate every live sandbox of this process (what the signal handlers do), including ones whose
 * create is in flight (waiting for those at most `createGraceMs`). */
export async function terminateAll(
  reason: TerminateReason = 'requested',
  createGraceMs = 10_000,
): Promise<void> {
  if (creating.size > 0) {
    await Promise.race([
      Promise.allSettled([...creating]),
      new Promise((r) => setTimeout(r, createGraceMs).unref()),
    ]);
  }
  await Promise.all([...live].map((s) => s.terminateWith(reason)));
}

function runExitHooks(): void {
  for (const hook of [...exitHooks]) {
    try {
      hook();
    } catch {
      // best effort at exit; the reaper catches what is left
    }
  }
}

/**
 * A signal is handled like a crash: creates in flight are aborted (they clean up after themselves), live
 * sandboxes are terminated, then the signal is re-raised with its default disposition so the process
 * exits with the signal's status, unless the program has handlers of its own, which then decide.
 */
function onSignal(signal: NodeJS.Signals): void {
  if (!shutdown.signal.aborted) {
    shutdown.abort(
      new SandboxError(`this process received ${signal}; no new sandboxes are created`, {
        code: 'sandbox_shutting_down',
      }),
    );
  }
  void terminateAll('signal').finally(() => {
    runExitHooks();
    if (process.listenerCount(signal) === 1) {
      process.removeListener(signal, onSignal);
      process.kill(process.pid, signal);
    }
  });
}

/** Options of `register`: signal handlers and the lifetime after which the registry terminates a sandbox. */
export interface RegisterOptions {
  /** Install SIGINT/SIGTERM/SIGHUP and exit handlers that terminate live sandboxes (default true). */
  handleSignals?: boolean | undefined;
  lifetimeMs?: number | undefined;
}

function installHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  for (const sig of SIGNALS) process.on(sig, onSignal);
  process.on('exit', runExitHooks);
}

/** Track a sandbox until it terminates; returns the function that stops tracking it. */
export function register(sandbox: Terminable, options: RegisterOptions = {}): () => void {
  live.add(sandbox);
  if (options.handleSignals !== false) installHandlers();
  const timer =
    options.lifetimeMs === undefined
      ? undefined
      : setTimeout(() => void sandbox.terminateWith('lifetime'), options.lifetimeMs);
  timer?.unref();
  return () => {
    if (timer) clearTimeout(timer);
    live.delete(sandbox);
  };
}

/** Pass `warning` events on to an optional logger (once per emitter). */
export function forwardWarnings(events: SandboxEmitter, logger: Logger | undefined): void {
  if (!logger?.warn) return;
  events.on('warning', (w) => logger.warn?.(w.message, { cause: w.cause }));
}

/**
 * The provider with every `create` tracked while in flight (see `trackCreate`), given a signal that also
 * aborts when this process is told to stop, and refused once it has been.
 */
export function withTrackedCreate(provider: SandboxProvider, handleSignals = true): SandboxProvider {
  const create = provider.create.bind(provider);
  return {
    ...provider,
    create: (spec, options = {}) => {
      if (handleSignals && shutdown.signal.aborted) return Promise.reject(shutdown.signal.reason);
      const signal = !handleSignals
        ? options.signal
        : options.signal
          ? AbortSignal.any([options.signal, shutdown.signal])
          : shutdown.signal;
      return trackCreate(create(spec, { ...options, signal }), handleSignals);
    },
  };
}
