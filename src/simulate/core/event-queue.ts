/**
 * The simulator's event queue: a binary min-heap of items ordered by (time, insertion order).
 * Two items at the same virtual time come out in the order they went in, so a simulation is a
 * pure function of its inputs and seed, whatever the heap's internal arrangement.
 *
 * Times and sequence numbers live in typed arrays beside an array of items, moved in lockstep:
 * no wrapper object per entry and no comparator closure, since a 1,024-GPU run pushes and pops
 * millions of events. Capacity doubles when full and never shrinks (a run's queue stays small:
 * about one pending event per actor).
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export class EventQueue<T> {
  private times: Float64Array;
  /** Insertion order; a float64 counts exactly to 2^53, beyond any run. */
  private seqs: Float64Array;
  private items: (T | undefined)[];
  private count = 0;
  private nextSeq = 0;

  constructor(initialCapacity = 64) {
    const capacity = Math.max(1, Math.floor(initialCapacity));
    this.times = new Float64Array(capacity);
    this.seqs = new Float64Array(capacity);
    this.items = new Array<T | undefined>(capacity);
  }

  get size(): number {
    return this.count;
  }

  /** The earliest time queued, or Infinity when empty. */
  peekTime(): number {
    return this.count === 0 ? Number.POSITIVE_INFINITY : this.times[0]!;
  }

  /** Queues `item` at `time` (a finite number; equal times keep insertion order). */
  push(time: number, item: T): void {
    if (!Number.isFinite(time)) {
      throw new InvalidInputError(ErrorCodes.SIM_PAST_EVENT, `an event time must be a finite number, got ${String(time)}`, { time });
    }
    if (this.count === this.times.length) this.grow();
    const seq = this.nextSeq++;
    // Sift up with a hole: parents move down until the new entry's place is found.
    let i = this.count++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(time, seq, parent)) break;
      this.move(parent, i);
      i = parent;
    }
    this.place(i, time, seq, item);
  }

  /** Removes and returns the earliest item (undefined when empty); `peekTime()` first gives its time. */
  pop(): T | undefined {
    if (this.count === 0) return undefined;
    const top = this.items[0];
    const last = --this.count;
    if (last > 0) {
      const time = this.times[last]!;
      const seq = this.seqs[last]!;
      const item = this.items[last];
      // Sift the last entry down from the root.
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        if (left >= last) break;
        const right = left + 1;
        const child = right < last && this.lessAt(right, left) ? right : left;
        if (!this.lessAtThan(child, time, seq)) break;
        this.move(child, i);
        i = child;
      }
      this.place(i, time, seq, item);
    }
    // Drop the reference so a popped item can be collected.
    this.items[last] = undefined;
    return top;
  }

  /** Empties the queue (insertion order keeps counting, so ties stay ordered across a clear). */
  clear(): void {
    this.items.fill(undefined, 0, this.count);
    this.count = 0;
  }

  private before(time: number, seq: number, at: number): boolean {
    const t = this.times[at]!;
    return time < t || (time === t && seq < this.seqs[at]!);
  }

  private lessAt(a: number, b: number): boolean {
    const ta = this.times[a]!;
    const tb = this.times[b]!;
    return ta < tb || (ta === tb && this.seqs[a]! < this.seqs[b]!);
  }

  private lessAtThan(at: number, time: number, seq: number): boolean {
    const t = this.times[at]!;
    return t < time || (t === time && this.seqs[at]! < seq);
  }

  private move(from: number, to: number): void {
    this.times[to] = this.times[from]!;
    this.seqs[to] = this.seqs[from]!;
    this.items[to] = this.items[from];
  }

  private place(at: number, time: number, seq: number, item: T | undefined): void {
    this.times[at] = time;
    this.seqs[at] = seq;
    this.items[at] = item;
  }

  private grow(): void {
    const capacity = this.times.length * 2;
    const times = new Float64Array(capacity);
    const seqs = new Float64Array(capacity);
    times.set(this.times);
    seqs.set(this.seqs);
    this.times = times;
    this.seqs = seqs;
    this.items.length = capacity;
  }
}
