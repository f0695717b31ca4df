/**
 * The one way to define a Prometheus metric in laminar: counter(), gauge() and histogram() take
 * the registry and prom-client's own configuration (less `registers`: the registry is the first
 * argument), so `buckets`, `collect`, `aggregator` and the rest pass through unchanged, and the
 * label names are typed from the `labelNames` literal (`labelNames: ['code']` gives
 * `Counter<'code'>`). Do not construct prom-client metrics directly.
 *
 * Why get-or-create: each daemon owns one Registry (see metrics.ts), but a library component
 * takes the registry it is given, and several components of one kind can share one in a single
 * process (tests, the demo: two samplers of one buffer, several pools). prom-client throws on a
 * second registration of a name; here the second registration returns the metric the first one
 * registered, so both count into the same series (they are told apart by their labels). The
 * configuration of the first registration wins: a later one's help, labels, buckets and
 * `collect` are ignored. A name already registered as another kind of metric is an error.
 *
 * onCollect() runs hooks right before a metric is read by a scrape, for state that is brought up
 * to date lazily; they run before the metric's own `collect` (which prom-client calls, and which
 * still runs with `this` bound to the metric).
 */
import { Counter, Gauge, Histogram, type CounterConfiguration, type GaugeConfiguration, type HistogramConfiguration, type Registry } from 'prom-client';

/** prom-client's configuration of a counter, without `registers`. */
export type CounterConfig<L extends string> = Omit<CounterConfiguration<L>, 'registers'>;
/** prom-client's configuration of a gauge, without `registers`. */
export type GaugeConfig<L extends string> = Omit<GaugeConfiguration<L>, 'registers'>;
/** prom-client's configuration of a histogram, without `registers`. */
export type HistogramConfig<L extends string> = Omit<HistogramConfiguration<L>, 'registers'>;

/** What getOrCreate needs of a configuration; the rest passes through to prom-client. */
interface BaseConfig {
  name: string;
  collect?: (this: never) => void | Promise<void>;
}

type MetricClass<M> = new (config: BaseConfig & { registers: Registry[]; collect: (this: M) => void | Promise<void> }) => M;

/** Callbacks run right before a metric is read (scraped), by metric object: see onCollect(). */
const collectHooks = new WeakMap<object, Set<() => void>>();

function getOrCreate<M extends object>(kind: MetricClass<M>, registry: Registry, config: BaseConfig): M {
  const existing: unknown = registry.getSingleMetric(config.name);
  if (existing !== undefined) {
    if (!(existing instanceof kind)) throw new Error(`metric ${config.name} is already registered as another kind of metric`);
    return existing;
  }
  const own = config.collect as ((this: M) => void | Promise<void>) | undefined;
  return new kind({
    ...config,
    registers: [registry],
    // prom-client calls collect() as a method of the metric before each read.
    collect(this: M) {
      const hooks = collectHooks.get(this);
      if (hooks) for (const hook of hooks) hook();
      return own?.call(this);
    },
  });
}

/**
 * Runs `hook` right before `metric` is read by a scrape (for state that is brought up to date
 * lazily), before the metric's own `collect`. Returns the function that removes the hook.
 */
export function onCollect(metric: object, hook: () => void): () => void {
  let hooks = collectHooks.get(metric);
  if (!hooks) collectHooks.set(metric, (hooks = new Set()));
  hooks.add(hook);
  return () => hooks.delete(hook);
}

/** The counter `config.name` of `registry`, registered with `config` unless it already is. */
export function counter<L extends string = never>(registry: Registry, config: CounterConfig<L>): Counter<L> {
  return getOrCreate(Counter as unknown as MetricClass<Counter<L>>, registry, config as BaseConfig);
}

/** The gauge `config.name` of `registry`, registered with `config` unless it already is. */
export function gauge<L extends string = never>(registry: Registry, config: GaugeConfig<L>): Gauge<L> {
  return getOrCreate(Gauge as unknown as MetricClass<Gauge<L>>, registry, config as BaseConfig);
}

/** The histogram `config.name` of `registry`, registered with `config` unless it already is. */
export function histogram<L extends string = never>(registry: Registry, config: HistogramConfig<L>): Histogram<L> {
  return getOrCreate(Histogram as unknown as MetricClass<Histogram<L>>, registry, config as BaseConfig);
}
