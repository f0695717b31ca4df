/**
 * The rollout agent's places at the engine: at most `limit` of its trajectories have a request
 * there at once (`--max-in-flight`). A trajectory takes a place for each turn it generates and
 * gives it up when the turn ends, so one waiting at a tool call holds none (its request has
 * ended, its KV is free) and the place goes to the next in line.
 *
 * The line is first come, first served: a trajectory whose tool result came back (or a new or
 * moved-in one) while every place is taken waits behind those that have waited longer. No
 * trajectory is passed over for ever, and a long episode cannot be starved by fresh claims.
 *
 * With progressive priority (turn-priority.ts) each turn asks with a priority, its trajectory's
 * predicted remaining time: the line is then ordered by it, largest first and first come first
 * served among equals (Heddle's longest-predicted-first, an approximation of LPT). A short
 * trajectory may then wait while longer ones pass it; it is what shortens the batch's tail.
 */

interface Waiter {
  priority: number;
  admit(): void;
  signal: AbortSignal;
  onAbort: () => void;
}

export class EngineSlots {
  private used = 0;
  /** Highest priority first, then longest waiting first. */
  private readonly line: Waiter[] = [];

  /** `limit` 0: no limit (batch mode: every claimed trajectory generates at once). */
  constructor(readonly limit: number) {}

  /** Places taken (requests at the engine). */
  get inUse(): number {
    return this.used;
  }

  /** Trajectories waiting for a place. */
  get waiting(): number {
    return this.line.length;
  }

  /**
   * Takes a place: at once when one is free and nobody waits, else when the ones ahead (of at
   * least its `priority`, longer in line) have had theirs. False when `signal` is aborted first
   * (the trajectory was stopped while in line).
   */
  acquire(signal: AbortSignal, priority = 0): Promise<boolean> {
    if (signal.aborted) return Promise.resolve(false);
    if ((this.limit === 0 || this.used < this.limit) && this.line.length === 0) {
      this.used++;
      return Promise.resolve(true);
    }
    return new Promise<boolean>((resolve) => {
      const waiter: Waiter = {
        priority,
        signal,
        admit: () => {
          signal.removeEventListener('abort', waiter.onAbort);
          resolve(true);
        },
        onAbort: () => {
          const at = this.line.indexOf(waiter);
          if (at >= 0) this.line.splice(at, 1);
          resolve(false);
        },
      };
      signal.addEventListener('abort', waiter.onAbort, { once: true });
      const behind = this.line.findIndex((w) => w.priority < priority);
      if (behind < 0) this.line.push(waiter);
      else this.line.splice(behind, 0, waiter);
    });
  }

  /** Gives a place back: it goes straight to the head of the line, if any. */
  release(): void {
    const next = this.line.shift();
    if (next) next.admit();
    else this.used = Math.max(0, this.used - 1);
  }
}
