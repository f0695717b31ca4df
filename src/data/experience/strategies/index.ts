export { type SamplingStrategy, type StrategyContext, seededRandom } from './strategy.js';
export { fifo, uniform, prioritized, type PrioritizedOptions } from './basic.js';
export { stalenessBounded, type StalenessOptions } from './staleness.js';
export { wholeGroups } from './groups.js';
