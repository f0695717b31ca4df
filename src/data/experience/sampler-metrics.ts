/**
 * The experience sampler's Prometheus metrics (laminar_buffer_*), labelled by buffer. Two
 * samplers of one buffer in one registry share them (see common/metric-factory.ts).
 */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../../common/metric-factory.js';
import { DeferredHistogram } from '../metrics.js';

const STALENESS_BUCKETS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64];

export interface SamplerMetrics {
  items: Gauge;
  bytes: Gauge;
  inserts: Counter;
  sampled: Counter;
  evicted: Counter;
  evictedBytes: Counter;
  orphanChunks: Counter;
  staleness: DeferredHistogram;
  latency: Histogram;
  spareBytes: Gauge;
  pendingDeletions: Gauge;
  completionMarks: Counter;
}

/** Registers (or finds) the sampler's metrics and zeroes the gauges of `buffer`. */
export function samplerMetrics(registry: Registry, buffer: string): SamplerMetrics {
  const b = { buffer };
  const m: SamplerMetrics = {
    items: gauge(registry, { name: 'laminar_buffer_items', help: 'Trajectories in the experience buffer (indexed by the sampler)', labelNames: ['buffer'] }),
    bytes: gauge(registry, { name: 'laminar_buffer_bytes', help: 'Payload bytes in the experience buffer', labelNames: ['buffer'] }),
    inserts: counter(registry, { name: 'laminar_buffer_inserts_total', help: 'Trajectories indexed by the sampler', labelNames: ['buffer'] }),
    sampled: counter(registry, { name: 'laminar_buffer_sampled_total', help: 'Trajectories handed to the trainer', labelNames: ['buffer'] }),
    evicted: counter(registry, {
      name: 'laminar_buffer_evicted_total',
      help: 'Trajectories removed from the buffer, by reason (capacity, sampled, stale, ...)',
      labelNames: ['buffer', 'reason'],
    }),
    evictedBytes: counter(registry, {
      name: 'laminar_buffer_evicted_bytes_total',
      help: 'Payload bytes removed from the buffer, by reason',
      labelNames: ['buffer', 'reason'],
    }),
    orphanChunks: counter(registry, {
      name: 'laminar_buffer_orphan_chunks_total',
      help: 'Chunks that no record claimed (a writer crashed mid-write), deleted',
      labelNames: ['buffer'],
    }),
    staleness: new DeferredHistogram(
      histogram(registry, {
        name: 'laminar_buffer_staleness',
        help: 'Staleness (trainer version - trajectory version) of sampled trajectories',
        labelNames: ['buffer'],
        buckets: STALENESS_BUCKETS,
      }),
      b,
    ),
    latency: histogram(registry, {
      name: 'laminar_buffer_sample_seconds',
      help: 'Time sample() took, by whether the batch was prefetched',
      labelNames: ['buffer', 'prefetched'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    }),
    spareBytes: gauge(registry, {
      name: 'laminar_buffer_spare_arena_bytes',
      help: 'Memory of batches the trainer released, kept for the next batches',
      labelNames: ['buffer'],
    }),
    pendingDeletions: gauge(registry, {
      name: 'laminar_buffer_pending_deletions',
      help: 'Stream messages of removed trajectories waiting for a moment between batch assemblies to be deleted',
      labelNames: ['buffer'],
    }),
    completionMarks: counter(registry, {
      name: 'laminar_buffer_completion_marks_total',
      help: 'Trajectories marked completed as their records left the buffer, by result (ok; failed: retried, the records kept meanwhile)',
      labelNames: ['buffer', 'result'],
    }),
  };
  m.items.set(b, 0);
  m.bytes.set(b, 0);
  m.spareBytes.set(b, 0);
  m.pendingDeletions.set(b, 0);
  return m;
}
