/**
 * Spare batch memory: the blocks of batches the trainer released (Batch.release()), kept for
 * the next batches' arenas. A reused block has its pages resident already, so the batch built
 * in it pays no page faults, and a trainer that releases each batch before the next is
 * assembled runs in about one batch of memory instead of two.
 *
 * The pool is bounded: it keeps at most `maxSpares` blocks (the oldest go first) and drops a
 * spare that does not suit the next batch (smaller, or more than twice its size). Holding such
 * a spare idle beside a fresh arena would cost more memory than not reusing at all. Blocks come
 * from and go back to an ArenaAllocator (arena-allocator.ts): private ArrayBuffers by default,
 * shared-memory files for the sampler service.
 */
import { Arena } from './arena.js';
import type { ArenaAllocator, ArenaBlock } from './arena-allocator.js';

export { detach } from './arena-allocator.js';

/** A spare larger than this many times the batch would pin memory the batch does not need. */
const MAX_OVERSIZE = 2;

/** An arena and the block it writes into (the batch's memory until the trainer releases it). */
export interface BlockArena {
  arena: Arena;
  block: ArenaBlock;
}

export class ArenaPool {
  private spares: ArenaBlock[] = [];
  private closed = false;

  /** `onChange(spareBytes)` follows every change (the sampler's gauge). */
  constructor(
    private readonly maxSpares: number,
    private readonly allocator: ArenaAllocator,
    private readonly onChange: (spareBytes: number) => void = () => undefined,
  ) {}

  get spareBytes(): number {
    let bytes = 0;
    for (const b of this.spares) bytes += b.buffer.byteLength;
    return bytes;
  }

  /** An arena of `size` bytes: over the best-fitting spare, or fresh memory when none suits. */
  async arena(size: number): Promise<BlockArena> {
    if (this.spares.length > 0 && size > 0) {
      const suits = (b: ArenaBlock): boolean => b.buffer.byteLength >= size && b.buffer.byteLength <= size * MAX_OVERSIZE;
      let best: ArenaBlock | undefined;
      for (const b of this.spares) if (suits(b) && (!best || b.buffer.byteLength < best.buffer.byteLength)) best = b;
      const kept: ArenaBlock[] = [];
      for (const b of this.spares) {
        if (b === best) continue;
        if (suits(b)) kept.push(b);
        else this.allocator.free(b);
      }
      this.spares = kept;
      this.onChange(this.spareBytes);
      if (best) return { arena: new Arena(size, best.buffer, false), block: best };
    }
    const block = await this.allocator.allocate(size);
    return { arena: new Arena(size, block.buffer, block.populate), block };
  }

  /**
   * Takes back the block of a batch the trainer released (through the allocator's reclaim) and
   * keeps it for a later batch; nothing may write into it behind the pool's back.
   */
  give(block: ArenaBlock): void {
    const kept = this.allocator.reclaim(block);
    if (!kept) return;
    this.keep(kept);
  }

  /** Keeps a block nobody outside the sampler has seen (a batch given up before hand-over). */
  keep(block: ArenaBlock): void {
    if (this.closed || block.buffer.byteLength === 0) {
      this.allocator.free(block);
      return;
    }
    this.spares.push(block);
    if (this.spares.length > this.maxSpares) for (const b of this.spares.splice(0, this.spares.length - this.maxSpares)) this.allocator.free(b);
    this.onChange(this.spareBytes);
  }

  /** Hands a block back to the allocator for good (a batch whose load failed, once nothing writes into it). */
  free(block: ArenaBlock): void {
    this.allocator.free(block);
  }

  /** Drops every spare and keeps nothing given later (the sampler is closing). */
  close(): void {
    this.closed = true;
    for (const b of this.spares) this.allocator.free(b);
    this.spares = [];
    this.onChange(0);
  }
}
