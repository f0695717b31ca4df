/**
 * The conservation ledger: one byte of state per trajectory id, and every transition checked
 * against the legal ones, so that a driver that loses a trajectory (a repack move that forgets
 * it) or makes one twice (a second completion) fails at the transition with the id, not as a
 * slightly wrong throughput. A trajectory goes
 *
 *   unclaimed → generating (claimed by a rollout) ⇄ moving (taken out by repack, not yet resumed)
 *             → buffered (completed) → consumed (trained on)
 *                                    ↘ dropped (by the sampling strategy, e.g. too stale)
 *
 *   generating → orphaned (its rollout died; its tokens as of the last partial-pool flush kept)
 *              → generating (resumed on a live rollout)
 *              ↘ returned (back in the prompt pool, its tokens discarded) → generating (claimed again)
 *
 * and `check()` at the end of a run asserts the totals: claimed = generating + moving + orphaned
 * + returned + buffered + consumed + dropped, and no id beyond the highest claimed was ever
 * touched. A trajectory claimed again after it was returned is still one claim: no trajectory is
 * made twice, and none is lost with a failed machine. Ids are dense (the prompt
 * pool hands them out in order), so a Uint8Array that doubles is the whole book.
 */
import { ErrorCodes, LaminarError } from '../common/errors.js';

/** A plain object rather than an enum: vitest's per-file transpiler cannot inline a const enum across files. */
export const TrajectoryState = { Unclaimed: 0, Generating: 1, Moving: 2, Buffered: 3, Consumed: 4, Dropped: 5, Orphaned: 6, Returned: 7 } as const;
export type TrajectoryState = (typeof TrajectoryState)[keyof typeof TrajectoryState];

const NAMES = ['unclaimed', 'generating', 'moving', 'buffered', 'consumed', 'dropped', 'orphaned', 'returned'] as const;

export interface LedgerTotals {
  claimed: number;
  generating: number;
  moving: number;
  buffered: number;
  consumed: number;
  /** Taken out of the buffer by the sampling strategy without being trained on (staleness bound). */
  dropped: number;
  /** Owned by a rollout that died, waiting for a live one (failures). */
  orphaned: number;
  /** Given back to the prompt pool after their orphan wait, not claimed again yet. */
  returned: number;
  /** Trajectories that went back to the prompt pool and were claimed again (each still one claim). */
  reclaimed: number;
  /** Transitions recorded (claims, moves out and in, completions, consumptions, drops). */
  transitions: number;
}

export class Ledger {
  private state = new Uint8Array(1024);
  private readonly counts = [0, 0, 0, 0, 0, 0, 0, 0];
  private reclaimedCount = 0;
  private claimedCount = 0;
  private highest = -1;
  private transitionCount = 0;

  claim(id: number): void {
    this.grow(id);
    this.move(id, TrajectoryState.Unclaimed, TrajectoryState.Generating, 'claim');
    this.claimedCount++;
    if (id > this.highest) this.highest = id;
  }

  /** Taken out of an engine by a repack move. */
  moveOut(id: number): void {
    this.move(id, TrajectoryState.Generating, TrajectoryState.Moving, 'move out');
  }

  /** Resumed on the move's destination. */
  moveIn(id: number): void {
    this.move(id, TrajectoryState.Moving, TrajectoryState.Generating, 'move in');
  }

  complete(id: number): void {
    this.move(id, TrajectoryState.Generating, TrajectoryState.Buffered, 'completion');
  }

  consume(id: number): void {
    this.move(id, TrajectoryState.Buffered, TrajectoryState.Consumed, 'consumption');
  }

  /** Dropped from the buffer by the strategy: accounted for, never trained on. */
  drop(id: number): void {
    this.move(id, TrajectoryState.Buffered, TrajectoryState.Dropped, 'drop');
  }

  /** Its rollout died: the trajectory waits, with its flushed tokens, for a live rollout. */
  orphan(id: number): void {
    this.move(id, TrajectoryState.Generating, TrajectoryState.Orphaned, 'orphaning');
  }

  /** An orphan resumed on a live rollout (or on its own, reinitialised). */
  resume(id: number): void {
    this.move(id, TrajectoryState.Orphaned, TrajectoryState.Generating, 'resumption');
  }

  /** An orphan nobody took within the wait: back to the prompt pool. */
  giveBack(id: number): void {
    this.move(id, TrajectoryState.Orphaned, TrajectoryState.Returned, 'return to the prompt pool');
  }

  /** A returned trajectory claimed again (not a new claim: the total of claims does not change). */
  reclaim(id: number): void {
    this.move(id, TrajectoryState.Returned, TrajectoryState.Generating, 'second claim');
    this.reclaimedCount++;
  }

  stateOf(id: number): TrajectoryState {
    return id < this.state.length ? (this.state[id] as TrajectoryState) : TrajectoryState.Unclaimed;
  }

  get totals(): LedgerTotals {
    const [, generating, moving, buffered, consumed, dropped, orphaned, returned] = this.counts as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    return {
      claimed: this.claimedCount,
      generating,
      moving,
      buffered,
      consumed,
      dropped,
      orphaned,
      returned,
      reclaimed: this.reclaimedCount,
      transitions: this.transitionCount,
    };
  }

  /**
   * The end-of-run audit: the per-state counts add up to the claims, and a recount of the bytes
   * agrees with the running counts (nothing was written around the transitions). O(ids).
   */
  check(): LedgerTotals {
    const recount = [0, 0, 0, 0, 0, 0, 0, 0];
    for (let id = 0; id <= this.highest; id++) recount[this.state[id]!]!++;
    for (let id = this.highest + 1; id < this.state.length; id++) {
      if (this.state[id] !== TrajectoryState.Unclaimed) throw internal(`trajectory ${id} is past the highest claim yet ${NAMES[this.state[id]!]}`, { id });
    }
    const totals = this.totals;
    const inBook = totals.generating + totals.moving + totals.orphaned + totals.returned + totals.buffered + totals.consumed + totals.dropped;
    if (inBook !== totals.claimed) throw internal(`${totals.claimed} trajectories claimed but ${inBook} accounted for`, { ...totals });
    for (let s = 1; s < recount.length; s++) {
      if (recount[s] !== this.counts[s])
        throw internal(`ledger recount of ${NAMES[s]} is ${recount[s]}, the running count ${this.counts[s]}`, { state: NAMES[s] });
    }
    return totals;
  }

  private move(id: number, from: TrajectoryState, to: TrajectoryState, what: string): void {
    const now = this.stateOf(id);
    if (now !== from)
      throw internal(`${what} of trajectory ${id}, which is ${NAMES[now]} (expected ${NAMES[from]})`, { id, state: NAMES[now], expected: NAMES[from] });
    this.state[id] = to;
    this.counts[from]!--;
    this.counts[to]!++;
    this.transitionCount++;
  }

  private grow(id: number): void {
    if (!Number.isSafeInteger(id) || id < 0) throw internal(`trajectory id ${id} is not a non-negative integer`, { id });
    if (id < this.state.length) return;
    let size = this.state.length;
    while (size <= id) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.state);
    this.state = next;
  }
}

function internal(message: string, details: Record<string, unknown>): LaminarError {
  return new LaminarError(ErrorCodes.INTERNAL, `simulator ledger: ${message}`, { details });
}
