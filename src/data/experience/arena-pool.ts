/**
 * Spare batch memory: the buffers of batches the trainer released (Batch.release()), kept for
 * the next batches' arenas. A reused buffer has its pages resident already, so the batch built
 * in it pays no page faults, and a trainer that releases each batch before the next is
 * assembled runs in about one batch of memory instead of two.
 *
 * The pool is bounded: it keeps at most `maxSpares` buffers (the oldest go first) and drops a
 * spare that does not suit the next batch (smaller, or more than twice its size). Holding such
 * a spare idle beside a fresh arena would cost more memory than not reusing at all.
 */
import { Arena } from './arena.js';

/** A spare larger than this many times the batch would pin memory the batch does not need. */
const MAX_OVERSIZE = 2;

/**
 * A new ArrayBuffer that owns `buffer`'s memory, without copying it. Every view of `buffer`
 * (the trainer's tokens and logprobs) reads as length 0 from then on, instead of showing the
 * bytes of whichever batch reuses the memory next. Node 20 has no ArrayBuffer.prototype.transfer;
 * structuredClone with a transfer list moves the backing store (about 1 ms for 1 GiB).
 */
export function detach(buffer: ArrayBuffer): ArrayBuffer {
  return structuredClone(buffer, { transfer: [buffer] });
}

export class ArenaPool {
  private spares: ArrayBuffer[] = [];
  private closed = false;

  /** `onChange(spareBytes)` follows every change (the sampler's gauge). */
  constructor(
    private readonly maxSpares: number,
    private readonly onChange: (spareBytes: number) => void = () => undefined,
  ) {}

  get spareBytes(): number {
    let bytes = 0;
    for (const b of this.spares) bytes += b.byteLength;
    return bytes;
  }

  /** An arena of `size` bytes: over the best-fitting spare, or fresh memory when none suits. */
  arena(size: number): Arena {
    if (this.spares.length === 0 || size === 0) return new Arena(size);
    const suits = (b: ArrayBuffer): boolean => b.byteLength >= size && b.byteLength <= size * MAX_OVERSIZE;
    let best: ArrayBuffer | undefined;
    for (const b of this.spares) if (suits(b) && (!best || b.byteLength < best.byteLength)) best = b;
    this.spares = this.spares.filter((b) => b !== best && suits(b));
    this.onChange(this.spareBytes);
    return new Arena(size, best);
  }

  /** Keeps `buffer` for a later batch; nothing may write into it behind the pool's back. */
  give(buffer: ArrayBuffer): void {
    if (this.closed || buffer.byteLength === 0) return;
    this.spares.push(buffer);
    if (this.spares.length > this.maxSpares) this.spares.splice(0, this.spares.length - this.maxSpares);
    this.onChange(this.spareBytes);
  }

  /** Drops every spare and keeps nothing given later (the sampler is closing). */
  close(): void {
    this.closed = true;
    this.spares = [];
    this.onChange(0);
  }
}
