/**
 * Metric helpers for the data module. Components take a prom-client Registry (one per daemon,
 * see common/metrics.ts); two components of the same kind in one registry share the metric
 * objects instead of failing on a duplicate registration.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { LaminarError } from '../common/errors.js';

type MetricCtor<T> = new (config: { name: string; help: string; labelNames?: readonly string[]; registers: Registry[]; buckets?: number[]; collect?: () => void }) => T;

/** Callbacks run right before a metric is read (scraped), by metric object: see onCollect(). */
const collectHooks = new WeakMap<object, Set<() => void>>();

function getOrCreate<T>(ctor: MetricCtor<T>, registry: Registry, name: string, help: string, labelNames: readonly string[] = [], buckets?: number[]): T {
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as unknown as T;
  const metric: T = new ctor({
    name,
    help,
    labelNames,
    registers: [registry],
    ...(buckets ? { buckets } : {}),
    collect: () => {
      for (const hook of collectHooks.get(metric as object) ?? []) hook();
    },
  });
  return metric;
}

/**
 * Runs `hook` right before `metric` is read by a scrape (for state that is brought up to date
 * lazily). Returns the function that removes the hook.
 */
export function onCollect(metric: object, hook: () => void): () => void {
  let hooks = collectHooks.get(metric);
  if (!hooks) collectHooks.set(metric, (hooks = new Set()));
  hooks.add(hook);
  return () => hooks.delete(hook);
}

export const counter = (r: Registry, name: string, help: string, labels: readonly string[] = []): Counter<string> =>
  getOrCreate(Counter as MetricCtor<Counter<string>>, r, name, help, labels);
export const gauge = (r: Registry, name: string, help: string, labels: readonly string[] = []): Gauge<string> =>
  getOrCreate(Gauge as MetricCtor<Gauge<string>>, r, name, help, labels);
export const histogram = (r: Registry, name: string, help: string, buckets: number[], labels: readonly string[] = []): Histogram<string> =>
  getOrCreate(Histogram as MetricCtor<Histogram<string>>, r, name, help, labels, buckets);

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
    private readonly hist: Histogram<string>,
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
  private readonly counter: Counter<string>;
  constructor(registry: Registry, private readonly component: string) {
    this.counter = counter(registry, 'laminar_data_rejections_total', 'Inputs and requests rejected by the data module, by component and error code', ['component', 'code']);
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
