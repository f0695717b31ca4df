/**
 * Metric helpers for the data module: histogram observations deferred off hot paths, and the
 * count of rejections by component and code. Metrics are defined with common/metric-factory.ts
 * (counter, gauge, histogram: a second registration gets the first one's metric; onCollect).
 */
import type { Counter, Histogram, Registry } from 'prom-client';
import { LaminarError } from '../common/errors.js';
import { counter, onCollect } from '../common/metric-factory.js';

/**
 * Observations of one label set of a histogram, counted in place (value -> count) and handed to
 * prom-client later: on the next turn of the event loop or when the histogram is scraped,
 * whichever comes first. A hot path (a batch hand-over) then pays one map update per distinct
 * value instead of one prom-client observe() per item.
 */
export class DeferredHistogram {
  private pending = new Map<number, number>();
  private scheduled = false;
  private readonly unhook: () => void;

  constructor(
    private readonly hist: Histogram,
    private readonly labels: Record<string, string>,
  ) {
    this.unhook = onCollect(hist, () => this.flush());
  }

  /** `count` observations of `value`. */
  observe(value: number, count = 1): void {
    if (count <= 0) return;
    this.pending.set(value, (this.pending.get(value) ?? 0) + count);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  flush(): void {
    this.scheduled = false;
    if (this.pending.size === 0) return;
    const pending = this.pending;
    this.pending = new Map();
    for (const [value, count] of pending) for (let i = 0; i < count; i++) this.hist.observe(this.labels, value);
  }

  /** Flushes and detaches (the owner is closing). */
  dispose(): void {
    this.flush();
    this.unhook();
  }
}

/** Counts every rejection by component and stable code, then rethrows it. */
export class RejectionCounter {
  private readonly counter: Counter;
  constructor(
    registry: Registry,
    private readonly component: string,
  ) {
    this.counter = counter(registry, {
      name: 'laminar_data_rejections_total',
      help: 'Inputs and requests rejected by the data module, by component and error code',
      labelNames: ['component', 'code'],
    });
  }

  count(code: string, n = 1): void {
    this.counter.inc({ component: this.component, code }, n);
  }

  /** Counts `err` when it is a LaminarError and returns it, for `throw rejections.record(err)`. */
  record<E>(err: E): E {
    if (err instanceof LaminarError) this.count(err.code);
    return err;
  }
}
