/**
 * Staleness-bounded sampling: entries older than `maxStaleness` weight versions are dropped
 * (evicted, counted as 'stale') or down-weighted (weight decay^(staleness - max)).
 */
import { fifo, prioritized } from './basic.js';
import type { SamplingStrategy } from './strategy.js';

export interface StalenessOptions {
  maxStaleness: number;
  /** 'drop' (default) or 'downweight'. */
  mode?: 'drop' | 'downweight';
  /** Strategy applied to the fresh-enough entries in 'drop' mode. Default FIFO. */
  inner?: SamplingStrategy;
  /** Per version beyond the bound, in 'downweight' mode. Default 0.5. */
  decay?: number;
}

export function stalenessBounded(options: StalenessOptions): SamplingStrategy {
  const max = options.maxStaleness;
  if (options.mode === 'downweight') {
    const decay = options.decay ?? 0.5;
    const weighted = prioritized({ priority: (e, ctx) => e.priority * Math.pow(decay, Math.max(0, ctx.staleness(e) - max)) });
    return { ...weighted, name: `staleness-downweight(${max})` };
  }
  const inner = options.inner ?? fifo();
  return {
    name: `staleness-drop(${max},${inner.name})`,
    select(c, n, ctx) {
      const fresh = c.filter((e) => {
        if (ctx.staleness(e) <= max) return true;
        ctx.drop(e, 'stale');
        return false;
      });
      return inner.select(fresh, n, ctx);
    },
    impossible: inner.impossible?.bind(inner),
    accept: (e, ctx) => ctx.staleness(e) <= max && (inner.accept?.(e, ctx) ?? true),
  };
}
