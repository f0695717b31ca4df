/**
 * The strategies a trainer names in its options (sim-trainer's --strategy and --max-staleness,
 * a simulator scenario's trainer.strategy and maxStaleness): one mapping, so both mean the same.
 */
import { fifo, uniform } from './basic.js';
import { wholeGroups } from './groups.js';
import { stalenessBounded } from './staleness.js';
import type { SamplingStrategy } from './strategy.js';

export const NAMED_STRATEGIES = ['fifo', 'groups', 'uniform'] as const;
export type StrategyName = (typeof NAMED_STRATEGIES)[number];

/** fifo / whole groups / uniform; with a maxStaleness, entries staler than it are dropped first. */
export function strategyByName(strategy: StrategyName, maxStaleness: number | null): SamplingStrategy {
  const inner = strategy === 'groups' ? wholeGroups() : strategy === 'uniform' ? uniform() : fifo();
  return maxStaleness === null ? inner : stalenessBounded({ maxStaleness, inner });
}
