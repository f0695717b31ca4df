/** A sampled batch as the trainer gets it: payloads, per-item staleness and a summary. */
import type { Trajectory } from '../codec/trajectory.js';
import type { ArenaBlock } from './arena-allocator.js';

export interface SampledTrajectory extends Trajectory {
  /** Stream sequence of the record. */
  seq: number;
  /** trainerVersion - weightVersion at hand-over. */
  staleness: number;
  /** Including this time. */
  timesSampled: number;
}

export interface StalenessSummary {
  min: number;
  max: number;
  mean: number;
  /** staleness value -> number of trajectories. */
  histogram: Record<number, number>;
}

export interface Batch {
  items: SampledTrajectory[];
  trainerVersion: number;
  staleness: StalenessSummary;
  /** Group ids in the batch, in order of first appearance. */
  groups: string[];
  /** Payload bytes. */
  bytes: number;
  /**
   * The block of memory the payloads live in, from the sampler's ArenaAllocator (for the
   * sampler service: a file in shared memory). The layout in `memory.buffer` is packed in item
   * order: every item's tokens (int32), then every item's logprobs (float32), from offset 0.
   * After release() it belongs to the sampler again.
   */
  memory: ArenaBlock;
  /** True when the batch was assembled ahead of the call (prefetch). */
  prefetched: boolean;
  /**
   * The trainer is done with the payload bytes (typically once they are on the device). The
   * batch's memory goes back to the sampler for a later batch, and every `tokens` and
   * `logprobs` view of this batch (and anything else over its ArrayBuffer) reads as length 0
   * from then on. Metadata stays readable. With `prefetch: 'after-release'` this is also what
   * starts assembling the next batch. Idempotent; harmless after the sampler is closed.
   */
  release(): void;
}

/** Summary of the items' `staleness` (one pass, no intermediate array). */
export function summarizeStaleness(items: readonly { staleness: number }[]): StalenessSummary {
  const histogram: Record<number, number> = {};
  let sum = 0;
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < items.length; i++) {
    const s = items[i]!.staleness;
    histogram[s] = (histogram[s] ?? 0) + 1;
    sum += s;
    if (s < min) min = s;
    if (s > max) max = s;
  }
  return items.length === 0 ? { min: 0, max: 0, mean: 0, histogram } : { min, max, mean: sum / items.length, histogram };
}
