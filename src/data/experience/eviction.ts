/**
 * Eviction: which entries leave the buffer when it is over capacity (items or bytes). A policy
 * only orders the victims; the sampler skips entries reserved by a prefetched batch, removes
 * the rest from the stream and counts them by reason. Nothing is ever dropped silently.
 */
import type { BufferEntry } from './entry.js';
import type { StrategyContext } from './strategies/strategy.js';

export interface EvictionPolicy {
  readonly name: string;
  /** Entries in the order they should go (first = first evicted). */
  order(entries: readonly BufferEntry[], ctx: StrategyContext): Iterable<BufferEntry>;
}

export const oldestFirst = (): EvictionPolicy => ({ name: 'oldest', order: (entries) => entries });

export const mostStaleFirst = (): EvictionPolicy => ({
  name: 'most-stale',
  // Lowest weight version first; ties broken by age (entries come oldest first, sort is stable).
  order: (entries) => [...entries].sort((a, b) => a.weightVersion - b.weightVersion),
});

export interface EvictionOptions {
  /** Capacity in trajectories. Default 100 000. */
  maxItems?: number;
  /** Capacity in payload bytes. Default 16 GiB. */
  maxBytes?: number;
  /** 'oldest' (default), 'most-stale' or your own policy. */
  policy?: 'oldest' | 'most-stale' | EvictionPolicy;
  /** Remove an entry once sampled this many times. Default 1 (each trajectory trains once). Infinity keeps them. */
  maxTimesSampled?: number;
}

export interface ResolvedEviction {
  maxItems: number;
  maxBytes: number;
  policy: EvictionPolicy;
  maxTimesSampled: number;
}

export function resolveEviction(o: EvictionOptions = {}): ResolvedEviction {
  const policy = o.policy === undefined || o.policy === 'oldest' ? oldestFirst() : o.policy === 'most-stale' ? mostStaleFirst() : o.policy;
  return { maxItems: o.maxItems ?? 100_000, maxBytes: o.maxBytes ?? 16 * 2 ** 30, policy, maxTimesSampled: o.maxTimesSampled ?? 1 };
}
