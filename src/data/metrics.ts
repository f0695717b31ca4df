/**
 * Metric helpers for the data module. Components take a prom-client Registry (one per daemon,
 * see common/metrics.ts); two components of the same kind in one registry share the metric
 * objects instead of failing on a duplicate registration.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { LaminarError } from '../common/errors.js';

type MetricCtor<T> = new (config: { name: string; help: string; labelNames?: readonly string[]; registers: Registry[]; buckets?: number[] }) => T;

function getOrCreate<T>(ctor: MetricCtor<T>, registry: Registry, name: string, help: string, labelNames: readonly string[] = [], buckets?: number[]): T {
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as unknown as T;
  return new ctor({ name, help, labelNames, registers: [registry], ...(buckets ? { buckets } : {}) });
}

export const counter = (r: Registry, name: string, help: string, labels: readonly string[] = []): Counter<string> =>
  getOrCreate(Counter as MetricCtor<Counter<string>>, r, name, help, labels);
export const gauge = (r: Registry, name: string, help: string, labels: readonly string[] = []): Gauge<string> =>
  getOrCreate(Gauge as MetricCtor<Gauge<string>>, r, name, help, labels);
export const histogram = (r: Registry, name: string, help: string, buckets: number[], labels: readonly string[] = []): Histogram<string> =>
  getOrCreate(Histogram as MetricCtor<Histogram<string>>, r, name, help, labels, buckets);

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
