/** FIFO (the paper's default), uniform and prioritized (Reverb-style exponent) sampling. */
import type { BufferEntry } from '../entry.js';
import type { SamplingStrategy, StrategyContext } from './strategy.js';

/** Oldest first. With maxTimesSampled = 1 (the default) the buffer is a queue. */
export function fifo(): SamplingStrategy {
  return { name: 'fifo', select: (c, n) => (c.length >= n ? c.slice(0, n) : []) };
}

/** Uniformly at random, without replacement within a batch. */
export function uniform(): SamplingStrategy {
  return {
    name: 'uniform',
    select(c, n, ctx) {
      if (c.length < n) return [];
      const pool = c.slice();
      // Partial Fisher-Yates: the first n slots end up a uniform sample.
      for (let i = 0; i < n; i++) {
        const j = i + Math.floor(ctx.random() * (pool.length - i));
        [pool[i], pool[j]] = [pool[j]!, pool[i]!];
      }
      return pool.slice(0, n);
    },
  };
}

export interface PrioritizedOptions {
  /** Priority of an entry (>= 0); default: its stored priority (writer's, or updatePriority). */
  priority?: (e: BufferEntry, ctx: StrategyContext) => number;
  /** P(i) ∝ priority^exponent (Reverb's priority_exponent): 0 = uniform, 1 = proportional. */
  exponent?: number;
}

/**
 * Weighted sampling without replacement (Efraimidis-Spirakis: key = u^(1/w), take the largest
 * keys). Entries of priority 0 are never picked.
 */
export function prioritized(options: PrioritizedOptions = {}): SamplingStrategy {
  const alpha = options.exponent ?? 1;
  const priorityOf = options.priority ?? ((e: BufferEntry) => e.priority);
  return {
    name: 'prioritized',
    select(c, n, ctx) {
      const keyed: Array<{ e: BufferEntry; k: number }> = [];
      for (const e of c) {
        const w = Math.pow(Math.max(0, priorityOf(e, ctx)), alpha);
        if (w > 0 && Number.isFinite(w)) keyed.push({ e, k: Math.log(ctx.random() || Number.MIN_VALUE) / w });
      }
      if (keyed.length < n) return [];
      keyed.sort((a, b) => b.k - a.k);
      return keyed.slice(0, n).map((x) => x.e);
    },
  };
}
