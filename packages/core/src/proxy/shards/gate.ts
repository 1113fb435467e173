/**
 * The handover gate between a shard worker and the main thread: one shared counter per session, the
 * answers of that session being handed over to their clients right now, or `FINISHED`. A worker enters
 * the gate before an answer's last bytes go out and leaves it once the answer is recorded (or given up);
 * `finishSession` on the main thread closes the gate, waiting for answers on their way. So a turn whose
 * answer a client got is in the rows `finishSession` returns, and one it did not get is not.
 */

/** The counter of a finished session: no answer may go out any more. */
const FINISHED = -1;

export class HandoverGate {
  readonly cells: Int32Array;

  constructor(cells: SharedArrayBuffer | number) {
    this.cells = new Int32Array(typeof cells === 'number' ? new SharedArrayBuffer(cells * 4) : cells);
  }

  get capacity(): number {
    return this.cells.length;
  }

  /** Worker side: an answer of the session in `slot` is about to go out; false once it is finished. */
  enter(slot: number): boolean {
    for (;;) {
      const n = Atomics.load(this.cells, slot);
      if (n === FINISHED) return false;
      if (Atomics.compareExchange(this.cells, slot, n, n + 1) === n) return true;
    }
  }

  /** Worker side: that answer was recorded or given up. */
  leave(slot: number): void {
    for (;;) {
      const n = Atomics.load(this.cells, slot);
      if (n <= 0) return; // closed by force meanwhile
      if (Atomics.compareExchange(this.cells, slot, n, n - 1) === n) break;
    }
    Atomics.notify(this.cells, slot);
  }

  /**
   * Main side: finish the session in `slot`. Waits for answers on their way, at most `waitMs` (a
   * client that stopped reading keeps one on its way); false when it had to close with one still going.
   */
  close(slot: number, waitMs: number): boolean {
    const deadline = performance.now() + waitMs;
    for (;;) {
      const n = Atomics.load(this.cells, slot);
      if (n === FINISHED) return true;
      if (n === 0 && Atomics.compareExchange(this.cells, slot, 0, FINISHED) === 0) return true;
      const left = deadline - performance.now();
      if (left <= 0) {
        Atomics.store(this.cells, slot, FINISHED);
        return false;
      }
      if (n > 0) Atomics.wait(this.cells, slot, n, left);
    }
  }

  /** Main side: a new session takes the slot. */
  open(slot: number): void {
    Atomics.store(this.cells, slot, 0);
  }
}
