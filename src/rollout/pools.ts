/**
 * The three data-plane pools a rollout works with, opened the way every rollout process opens
 * them (the rollout agent and the simulated rollout): the prompt pool on Redis, the experience
 * writer checking groups against it, and the partial-response pool completing into the writer.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool, type ClaimOrder } from '../data/index.js';
import type { PoolRedis } from '../data/prompts/redis-address.js';

export interface RolloutPoolsOptions {
  nc: NatsConnection;
  redis: PoolRedis;
  /** Which pending prompt a claim takes (PromptPool's `claimOrder`). Default 'fifo'. */
  claimOrder?: ClaimOrder;
  /** Names of the pools; 'default' each when absent. */
  promptPool?: string;
  buffer?: string;
  partialPool?: string;
  /** Stream replicas if this process creates the buffer or the partial pool (3 on a NATS cluster). */
  replicas?: number;
  /** The partial pool's flush thresholds, where they differ from its defaults. */
  flushTokens?: number;
  flushMs?: number;
  registry: Registry;
  logger: Logger;
}

export interface RolloutPools {
  prompts: PromptPool;
  writer: ExperienceWriter;
  partials: PartialPool;
}

export async function openRolloutPools(options: RolloutPoolsOptions): Promise<RolloutPools> {
  const { nc, replicas, registry, logger } = options;
  const prompts = await PromptPool.open({
    redis: options.redis,
    name: options.promptPool ?? 'default',
    ...(options.claimOrder ? { claimOrder: options.claimOrder } : {}),
    registry,
    logger,
  });
  const writer = await ExperienceWriter.open({ nc, buffer: options.buffer ?? 'default', replicas, groups: prompts, registry, logger });
  const partials = await PartialPool.open({
    nc,
    pool: options.partialPool ?? 'default',
    replicas,
    writer,
    ...(options.flushTokens !== undefined ? { flushTokens: options.flushTokens } : {}),
    ...(options.flushMs !== undefined ? { flushMs: options.flushMs } : {}),
    registry,
    logger,
  });
  return { prompts, writer, partials };
}
