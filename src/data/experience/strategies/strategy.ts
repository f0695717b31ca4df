/**
 * A sampling strategy picks the entries of the next batch from the candidates (oldest first,
 * metadata only). Returning fewer than `count` means "not yet": the sampler waits for more
 * data and asks again. Strategies are plain objects, so a user's own is a few lines.
 */
import type { BufferEntry, GroupState } from '../entry.js';

export interface StrategyContext {
  /** The trainer's current weight version. */
  readonly trainerVersion: number;
  /** trainerVersion - entry.weightVersion (never negative). */
  staleness(e: BufferEntry): number;
  /** Seeded uniform [0, 1) source (deterministic tests). */
  random(): number;
  /** Removes an entry from the buffer for good; counted under `reason` in the eviction metrics. */
  drop(e: BufferEntry, reason: string): void;
  /** GRPO groups currently in the buffer. */
  readonly groups: ReadonlyMap<string, GroupState>;
}

export interface SamplingStrategy {
  readonly name: string;
  select(candidates: readonly BufferEntry[], count: number, ctx: StrategyContext): readonly BufferEntry[];
  /** A reason why `count` can never be satisfied (ERR_BATCH_IMPOSSIBLE), or undefined. */
  impossible?(count: number, ctx: StrategyContext): string | undefined;
  /** Re-checked when a prefetched batch is handed over (the trainer version may have moved). */
  accept?(e: BufferEntry, ctx: StrategyContext): boolean;
}

export { seededRandom } from '../../../common/random.js';
