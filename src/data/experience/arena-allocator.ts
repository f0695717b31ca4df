/**
 * Where batch memory comes from. The sampler asks an ArenaAllocator for a block of memory per
 * batch (arena-pool.ts keeps released blocks for later batches, arena.ts fills one). The default
 * is private memory: an ArrayBuffer of the process. Another allocator can put batches where
 * another process sees them: the sampler service (src/data/sampler-service/) hands out blocks
 * that are files in shared memory, which a Python trainer maps.
 *
 * The sampler writes payloads only into `block.buffer`; whatever else a block carries (a file, a
 * mapping, room for the allocator's own use) is the allocator's business.
 */

export interface ArenaBlock {
  /** Where the sampler writes a batch's payloads: at least the size that was asked for. */
  readonly buffer: ArrayBuffer;
  /**
   * True when the pages of a fresh block are not backed by memory yet, so that the arena
   * populates them off the JS thread before large writes (arena.ts). False when the allocator
   * made them resident already (a file reserved with fallocate).
   */
  readonly populate: boolean;
}

export interface ArenaAllocator<B extends ArenaBlock = ArenaBlock> {
  /** For logs and errors. */
  readonly name: string;
  /** A new block of at least `size` bytes (`size` may be 0). */
  allocate(size: number): B | Promise<B>;
  /**
   * The trainer released the batch in `block`: the block as the pool keeps it for a later batch,
   * or undefined when it cannot be kept. Private memory moves under a new ArrayBuffer here, so
   * that the trainer's views of the released batch read as empty rather than as the next batch.
   */
  reclaim(block: B): B | undefined;
  /** The pool lets go of `block` for good (no room among the spares, unsuitable, sampler closed). */
  free(block: B): void;
}

/**
 * A new ArrayBuffer that owns `buffer`'s memory, without copying it. Every view of `buffer`
 * (the trainer's tokens and logprobs) reads as length 0 from then on, instead of showing the
 * bytes of whichever batch reuses the memory next. Node 20 has no ArrayBuffer.prototype.transfer;
 * structuredClone with a transfer list moves the backing store (about 1 ms for 1 GiB).
 */
export function detach(buffer: ArrayBuffer): ArrayBuffer {
  return structuredClone(buffer, { transfer: [buffer] });
}

/** The default: batches in private ArrayBuffers of this process, freed by the garbage collector. */
export function privateArenas(): ArenaAllocator {
  return {
    name: 'private',
    allocate: (size) => ({ buffer: new ArrayBuffer(size), populate: true }),
    // A buffer the trainer detached itself (transferred elsewhere) is gone and is not kept.
    reclaim: (block) => (block.buffer.byteLength > 0 ? { buffer: detach(block.buffer), populate: false } : undefined),
    free: () => undefined,
  };
}
