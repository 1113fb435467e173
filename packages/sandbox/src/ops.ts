/**
 * What every provider's sandbox does the same way around its operations: each one is tracked so that a
 * terminate aborts it with `sandbox_terminated`, none starts once terminating, and terminate cleans up
 * once (whoever calls it, however often), then unregisters and emits `terminate`.
 */
import { SandboxError } from '@vime/core';
import type { OpOptions, SandboxEmitter, TerminateReason } from './types.js';

/** What `SandboxOps` needs of its sandbox: its id, its provider's name and events, and how to unregister it. */
export interface SandboxOpsInit {
  id: string;
  provider: string;
  events: SandboxEmitter;
  /** Drops the sandbox from the leak-proofing registry (`register`'s result). */
  unregister: () => void;
}

/** The operations of one sandbox: tracked, aborted on terminate, and the terminate run once. */
export class SandboxOps {
  readonly #init: SandboxOpsInit;
  readonly #running = new Set<AbortController>();
  #terminating: Promise<void> | undefined;
  #reason: TerminateReason | undefined;

  constructor(init: SandboxOpsInit) {
    this.#init = init;
  }

  /** Whether terminate was called. */
  get terminating(): boolean {
    return this.#terminating !== undefined;
  }

  /** Why the sandbox is being terminated, once it is. */
  get reason(): TerminateReason | undefined {
    return this.#reason;
  }

  /** Run one operation; a terminate aborts its signal. */
  async track<T>(options: OpOptions, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (this.#terminating) {
      throw new SandboxError(`sandbox ${this.#init.id} was terminated; claim or create a new one`, {
        code: 'sandbox_terminated',
      });
    }
    const controller = new AbortController();
    this.#running.add(controller);
    const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
    try {
      return await fn(signal);
    } finally {
      this.#running.delete(controller);
    }
  }

  /**
   * Abort every operation in flight and run `cleanup` once; a cleanup that fails is a `warning` event
   * (`failure` says what was left), never a rejection: terminate always completes.
   */
  terminate(reason: TerminateReason, cleanup: () => Promise<void>, failure: string): Promise<void> {
    const { id, provider, events, unregister } = this.#init;
    this.#reason ??= reason;
    this.#terminating ??= (async () => {
      const started = performance.now();
      for (const c of this.#running)
        c.abort(new SandboxError(`sandbox ${id} was terminated (${reason})`, { code: 'sandbox_terminated' }));
      try {
        await cleanup();
      } catch (error) {
        events.emit('warning', { message: failure, cause: error });
      }
      unregister();
      events.emit('terminate', { id, provider, reason, durationMs: performance.now() - started });
    })();
    return this.#terminating;
  }
}
