/**
 * What the engine router and the proxy did over a run: engines taken down and readmitted (with what
 * triggered the check), breaker openings, sessions moved, turns retried or continued across an update.
 */
import type { CaptureProxy } from '@vime/core/proxy';

/** One engine router event, as the run records it. */
export interface RouterLogEntry {
  event: 'engine:down' | 'engine:up' | 'breaker:open' | 'breaker:close';
  /** Wall-clock milliseconds (Date.now), so a caller can compare with its own events. */
  at: number;
  url?: string | undefined;
  trigger?: string | undefined;
  cause?: string | undefined;
  /** Rollouts finished (any status) when it happened. */
  rolloutsFinished: number;
  /** Sandbox claims started by then. */
  claimsStarted: number;
}

type EntryFields = Pick<RouterLogEntry, 'url' | 'trigger' | 'cause'>;

export class RouterLog {
  readonly entries: RouterLogEntry[] = [];
  rolloutsFinished = 0;
  claimsStarted = 0;
  sessionMoves = 0;
  turnRetries = 0;
  turnInterruptions = 0;

  constructor(
    proxy: CaptureProxy,
    private readonly log: (line: string) => void,
  ) {
    const { router } = proxy;
    router.events.on('engine:down', (e) => this.#note('engine:down', e));
    router.events.on('engine:up', (e) => this.#note('engine:up', { url: e.url, trigger: e.trigger }));
    router.events.on('breaker:open', (e) =>
      this.#note('breaker:open', { cause: Object.values(e.causes).join('; ') }),
    );
    router.events.on('breaker:close', (e) => this.#note('breaker:close', { url: e.url }));
    router.events.on('session:moved', () => this.sessionMoves++);
    proxy.events.on('turn:retry', () => this.turnRetries++);
    proxy.events.on('turn:interrupted', () => this.turnInterruptions++);
  }

  #note(event: RouterLogEntry['event'], fields: EntryFields): void {
    const { rolloutsFinished, claimsStarted } = this;
    this.entries.push({ event, at: Date.now(), rolloutsFinished, claimsStarted, ...fields });
    const what = [fields.url, fields.trigger && `check on ${fields.trigger}`, fields.cause].filter(Boolean);
    this.log(`router: ${event} ${what.join('; ')}`);
  }
}
