/** The sampler service's own Prometheus metrics (laminar_sampler_service_*); the sampler's are laminar_buffer_*. */
import type { Counter, Gauge, Registry } from 'prom-client';
import { counter, gauge } from '../../common/metric-factory.js';

export interface SamplerServiceMetrics {
  connections: Gauge;
  batchesHeld: Gauge;
  requests: Counter<'op' | 'result'>;
  arenaFiles: Gauge;
  arenaBytes: Gauge;
}

export function samplerServiceMetrics(registry: Registry): SamplerServiceMetrics {
  return {
    connections: gauge(registry, { name: 'laminar_sampler_service_connections', help: 'Clients connected to the sampler service' }),
    batchesHeld: gauge(registry, { name: 'laminar_sampler_service_batches_held', help: 'Batches handed to clients and not released yet' }),
    requests: counter(registry, {
      name: 'laminar_sampler_service_requests_total',
      help: 'Requests to the sampler service, by operation and result (ok or the error code)',
      labelNames: ['op', 'result'],
    }),
    arenaFiles: gauge(registry, { name: 'laminar_sampler_service_arena_files', help: 'Shared-memory arena files held (batches held, prefetched and spare)' }),
    arenaBytes: gauge(registry, { name: 'laminar_sampler_service_arena_bytes', help: 'Bytes of the shared-memory arena files held' }),
  };
}
