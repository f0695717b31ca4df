/**
 * One simulated rollout, wired to real services: the SDK (control plane on NATS, prompt pool on
 * Redis, partial pool and experience buffer on JetStream, weights from the local relay) around a
 * SimRolloutEngine. Used by `laminar sim-rollout`, the demo and the repack benchmark.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { PoolRedis } from '../../data/prompts/redis-address.js';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { silentLogger } from '../../common/logger.js';
import { createRegistry } from '../../common/metrics.js';
import { openRolloutPools } from '../../rollout/pools.js';
import { RolloutClient } from '../../rollout/index.js';
import { SimRolloutEngine, type SimEngineOptions } from './sim-engine.js';

export interface SimRolloutOptions extends SimEngineOptions {
  nc: NatsConnection;
  redis: PoolRedis;
  job: string;
  id: string;
  model: string;
  relaySocket: string | null;
  host?: string;
  labels?: Record<string, string>;
  heartbeatMs?: number;
  promptPool?: string;
  partialPool?: string;
  buffer?: string;
  /** Replicas of the buffer, the partial pool and the control bucket if this rollout creates them (3 on a NATS cluster). */
  replicas?: number;
  /** Partial-pool flush policy (every K tokens or T ms). */
  flushTokens?: number;
  flushMs?: number;
  registry?: Registry;
  logger?: Logger;
}

export interface SimRollout {
  client: RolloutClient;
  engine: SimRolloutEngine;
  close(): Promise<void>;
}

export async function startSimRollout(options: SimRolloutOptions): Promise<SimRollout> {
  const registry = options.registry ?? createRegistry({ defaultMetrics: false });
  const logger = options.logger ?? silentLogger;
  const { prompts, writer, partials } = await openRolloutPools({ ...options, registry, logger });
  const engine = new SimRolloutEngine({ ...options, logger });
  const client = await RolloutClient.connect({
    nc: options.nc,
    job: options.job,
    id: options.id,
    model: options.model,
    engine,
    prompts,
    partials,
    writer,
    relaySocket: options.relaySocket,
    ...(options.host ? { host: options.host } : {}),
    ...(options.labels ? { labels: options.labels } : {}),
    ...(options.heartbeatMs ? { heartbeatMs: options.heartbeatMs } : {}),
    ...(options.replicas !== undefined ? { replicas: options.replicas } : {}),
    registry,
    logger,
  });
  engine.start(client);
  let closed = false;
  return {
    client,
    engine,
    async close() {
      if (closed) return;
      closed = true;
      await engine.close();
      await client.close();
      await partials.close();
    },
  };
}
