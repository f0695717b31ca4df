/**
 * Prometheus metrics: each daemon owns one prom-client Registry (never the global one, so that
 * several components can live in one process, as in tests) and serves it on /metrics.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry, collectDefaultMetrics } from 'prom-client';

/**
 * How often the event-loop lag is sampled. prom-client's default (10 ms) is a timer that wakes
 * an idle daemon 100 times a second, and every wake also polls the UCX worker: about 1 % of a
 * core per idle relay. Once a second still catches any hold-up (the late sample is the lag).
 */
const EVENT_LOOP_SAMPLE_MS = 1000;

export function createRegistry(options: { prefix?: string; defaultMetrics?: boolean } = {}): Registry {
  const registry = new Registry();
  if (options.defaultMetrics !== false) {
    collectDefaultMetrics({ register: registry, prefix: options.prefix ?? 'laminar_', eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  }
  return registry;
}

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

/**
 * Serves GET /metrics (Prometheus text) and GET /status (JSON from `status`, when given) on
 * host:port. Port 0 picks a free port; the bound port is in the result.
 */
export async function serveMetrics(
  registry: Registry,
  options: { host: string; port: number; status?: () => unknown },
): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const url = req.url ?? '/';
    if (req.method === 'GET' && url.startsWith('/metrics')) {
      registry
        .metrics()
        .then((text) => {
          res.writeHead(200, { 'content-type': registry.contentType });
          res.end(text);
        })
        .catch((err: unknown) => {
          res.writeHead(500).end(String(err));
        });
    } else if (req.method === 'GET' && url.startsWith('/status') && options.status) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(options.status()));
    } else {
      res.writeHead(404).end('not found\n');
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
