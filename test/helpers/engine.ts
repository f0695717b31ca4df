/**
 * An engine whose generation the test drives itself (claim, append, complete by hand), for tests
 * of the rollout SDK's other paths: its hooks do nothing.
 */
import type { RolloutEngine } from '../../src/rollout/engine.js';

export function inertEngine(promptTokens: Int32Array = Int32Array.of(7, 8, 9)): RolloutEngine {
  return {
    load: () => ({ kvUsed: 0, running: 0, waiting: 0, tokensPerSecond: 0 }),
    tokenize: () => promptTokens,
    stop: () => Promise.resolve(),
    resume: () => Promise.resolve(),
    updateWeights: () => Promise.resolve(),
    reinitialise: () => Promise.resolve(),
  };
}
