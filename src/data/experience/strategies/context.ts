/**
 * The StrategyContext a strategy (and an eviction policy) sees, built from plain values: the
 * sampler's books (buffer-books.ts) give it the trainer's version, their random source, the
 * index's groups and a drop() that evicts from the stream; the cluster simulator
 * (src/simulate/trainer/) gives it its own, so that both run the very same strategies.
 */
import type { BufferEntry, GroupState } from '../entry.js';
import type { StrategyContext } from './strategy.js';

export function strategyContext(
  trainerVersion: number,
  random: () => number,
  groups: ReadonlyMap<string, GroupState>,
  drop: (e: BufferEntry, reason: string) => void,
): StrategyContext {
  return {
    trainerVersion,
    staleness: (e) => Math.max(0, trainerVersion - e.weightVersion),
    random,
    drop,
    groups,
  };
}
