/**
 * Prometheus metrics: each daemon owns one prom-client Registry (never the global one, so that
 * several components can live in one process, as in tests) and serves it on /metrics (on the
 * router of http-server.ts). Metrics are defined with metric-factory.ts.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Registry, collectDefaultMetrics, type Gauge } from 'prom-client';
import { sendBody } from './http-answers.js';
import { startHttpServer, type HttpLimits, type HttpRoute } from './http-server.js';
import type { Logger } from './logger.js';
import { gauge } from './metric-factory.js';

/**
 * How often the event-loop lag is sampled. prom-client's default (10 ms) is a timer that wakes
 * an idle daemon 100 times a second, and every wake also polls the UCX worker: about 1 % of a
 * core per idle relay. Once a second still catches any hold-up (the late sample is the lag).
 */
const EVENT_LOOP_SAMPLE_MS = 1000;

/** The lag statistics prom-client derives from Node's event-loop delay histogram. */
const LAG_STATISTICS = ['min', 'max', 'mean', 'stddev', 'p50', 'p90', 'p99'] as const;

export function createRegistry(options: { prefix?: string; defaultMetrics?: boolean; eventLoopSampleMs?: number } = {}): Registry {
  const registry = new Registry();
  if (options.defaultMetrics !== false) {
    const prefix = options.prefix ?? 'laminar_';
    const sampleMs = options.eventLoopSampleMs ?? EVENT_LOOP_SAMPLE_MS;
    collectDefaultMetrics({ register: registry, prefix, eventLoopMonitoringPrecision: sampleMs });
    exportEventLoopLag(registry, prefix, sampleMs);
  }
  return registry;
}

/**
 * Node's event-loop delay histogram records the time between two of its timer's runs, so every
 * sample is the sampling period plus the lag; prom-client publishes those samples as they are.
 * With a 1 s period an idle daemon would show a p99 "lag" of 1 s. These gauges, under
 * prom-client's names, publish the lag alone (sample minus period), over the time since the
 * previous scrape.
 */
function exportEventLoopLag(registry: Registry, prefix: string, sampleMs: number): void {
  const histogram = monitorEventLoopDelay({ resolution: sampleMs });
  histogram.enable();
  const periodNs = sampleMs * 1e6;
  const lagSeconds = (ns: number): number => Math.max(0, ns - periodNs) / 1e9;
  const read: Record<(typeof LAG_STATISTICS)[number], () => number> = {
    min: () => lagSeconds(histogram.min),
    max: () => lagSeconds(histogram.max),
    mean: () => lagSeconds(histogram.mean),
    stddev: () => histogram.stddev / 1e9,
    p50: () => lagSeconds(histogram.percentile(50)),
    p90: () => lagSeconds(histogram.percentile(90)),
    p99: () => lagSeconds(histogram.percentile(99)),
  };
  const gauges = new Map<(typeof LAG_STATISTICS)[number], Gauge>();
  // The first gauge's collect sets them all from one snapshot of the histogram (the registry
  // reads metrics in the order they were registered), then starts a new one. A scrape between
  // two samples keeps the previous values.
  const collectAll = (): void => {
    if (histogram.count === 0) return;
    for (const [statistic, lag] of gauges) lag.set(read[statistic]());
    histogram.reset();
  };
  for (const statistic of LAG_STATISTICS) {
    const name = `${prefix}nodejs_eventloop_lag_${statistic}_seconds`;
    registry.removeSingleMetric(name);
    const help = `The ${statistic} of the event loop's lag since the last scrape (each sample less the ${sampleMs} ms sampling period)`;
    gauges.set(statistic, gauge(registry, { name, help, ...(gauges.size === 0 ? { collect: collectAll } : {}) }));
  }
}

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

/** `GET /metrics`: the registry's Prometheus text. */
export function metricsRoute(registry: Registry): HttpRoute {
  return {
    path: '/metrics',
    handle: async ({ res }) => {
      const text = await registry.metrics();
      sendBody(res, 200, { 'content-type': registry.contentType }, text);
    },
  };
}

/** `GET /status`: `JSON.stringify(status())`, no query parameters (the manager's own route takes filters). */
export function jsonStatusRoute(status: () => unknown): HttpRoute {
  return { path: '/status', handle: ({ res }) => sendBody(res, 200, { 'content-type': 'application/json' }, JSON.stringify(status())) };
}

/**
 * Serves GET /metrics (Prometheus text), GET /status (JSON from `status`, when given) and any
 * further `routes` on host:port, on the hardened router (http-server.ts). Port 0 picks a free
 * port; the bound port is in the result.
 */
export async function serveMetrics(
  registry: Registry,
  options: { host: string; port: number; status?: () => unknown; routes?: readonly HttpRoute[]; limits?: Partial<HttpLimits>; logger?: Logger },
): Promise<MetricsServer> {
  const routes = [metricsRoute(registry), ...(options.status ? [jsonStatusRoute(options.status)] : []), ...(options.routes ?? [])];
  return startHttpServer({
    host: options.host,
    port: options.port,
    routes,
    registry,
    ...(options.limits ? { limits: options.limits } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });
}
