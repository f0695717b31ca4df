/** Shared fixtures for the data-module tests: real servers, clients, trajectories. */
import { Redis } from 'ioredis';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import type { TrajectoryInput } from '../../src/data/index.js';

export function redisClient(port: number): Redis {
  // Retry quickly through a server restart; commands wait for the reconnection.
  return new Redis(port, '127.0.0.1', { retryStrategy: () => 50, maxRetriesPerRequest: 200 });
}

export async function natsClient(url: string): Promise<NatsConnection> {
  return connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
}

/** Value of a counter/gauge sample in a registry, by metric name and labels. */
export async function metricValue(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return 0;
  const data = await metric.get();
  const match = data.values.find((v) => Object.entries(labels).every(([k, val]) => String((v.labels as Record<string, unknown>)[k]) === val));
  return match?.value ?? 0;
}

let seq = 0;
/** A valid trajectory; `tokens` response tokens after a 4-token prompt. */
export function trajectory(over: Partial<TrajectoryInput> = {}, tokens = 12): TrajectoryInput {
  const n = tokens;
  const id = over.id ?? `t${++seq}`;
  return {
    id,
    promptId: 'p1',
    groupId: `g-${id}`,
    sampleIndex: 0,
    groupSize: 1,
    weightVersion: 0,
    reward: 1,
    tokens: Int32Array.from({ length: n }, (_, i) => i + 100),
    logprobs: Float32Array.from({ length: n }, (_, i) => -i / 10),
    promptLength: 4,
    responseLength: n - 4,
    ...over,
  };
}
