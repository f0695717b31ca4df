export { type SamplingStrategy, type StrategyContext, seededRandom } from './strategy.js';
export { fifo, uniform, prioritized, type PrioritizedOptions } from './basic.js';
export { stalenessBounded, type StalenessOptions } from './staleness.js';
export { wholeGroups } from './groups.js';
export { strategyContext } from './context.js';
export { NAMED_STRATEGIES, strategyByName, type StrategyName } from './by-name.js';
