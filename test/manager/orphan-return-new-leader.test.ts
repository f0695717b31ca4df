/**
 * A return to the prompt pool left pending by a manager that is gone, on a real nats-server and a
 * real redis-server: the first leader parks an orphan, its return fails (its Redis connection is
 * closed under it: the write never reaches Redis) and the leader goes away before its retry. The
 * next leader's scan finds the log parked and returns the sample under the parking's key: queued
 * once, counted `returned`, and regenerated. A third leader's scan, after the returned sample was
 * claimed and completed, reads 'duplicate' and queues nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { PARKED_OWNER, PartialPool, PromptPool } from '../../src/data/index.js';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { natsClient, redisClient } from '../data/helpers.js';
import { claimedOrphan, orphanCoordinator, type LogLine } from '../helpers/orphans.js';

let nats: NatsServer;
let nc: NatsConnection;
let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  nats = await startNatsServer({ jetstream: true });
  nc = await natsClient(nats.url);
  server = await startRedisServer();
  redis = redisClient(server.port);
});
afterAll(async () => {
  redis.disconnect();
  await server.stop();
  await nc.close();
  await nats.stop();
});

/**
 * A leading manager's coordinator with its own prompt-pool connection (what its pool logs, from
 * info up, in `poolLogs`), ticked every 50 ms until `stop()`.
 */
async function leader(partials: PartialPool, name: string) {
  const managerRedis = redisClient(server.port);
  const poolLogs: LogLine[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void poolLogs.push(JSON.parse(line) as LogLine) });
  const prompts = await PromptPool.open({ redis: managerRedis, name, registry: new Registry(), logger });
  // No rollout of version 2 is alive: an orphan is parked and returned at once.
  const { coordinator, logs } = orphanCoordinator(nc, { partials, prompts, orphanWaitMs: 0, orphanScanMs: 60_000 });
  const ticker = setInterval(() => coordinator.tick([]), 50);
  return {
    coordinator,
    logs,
    poolLogs,
    managerRedis,
    stop: () => {
      clearInterval(ticker);
      managerRedis.disconnect();
    },
  };
}

describe('orphan failover: a return pending in a manager that is gone', () => {
  it("is completed by the next leader's scan: the sample is queued once and regenerated", async () => {
    const name = 'orphanleader';
    // The dead rollout claimed the prompt and started its one sample.
    const { pool, partials, start } = await claimedOrphan(redis, nc, name);

    // The first leader's connection to Redis is gone: it parks the orphan, and the return fails.
    const first = await leader(partials, name);
    first.managerRedis.disconnect();
    try {
      await expect
        .poll(() => first.logs.some((l) => l.msg === "cannot return a parked orphan's sample to the prompt pool (retrying)"), {
          timeout: 20_000,
          message: 'the first leader never tried to return the orphan',
        })
        .toBe(true);
    } finally {
      // It dies before its retry: the pending return is lost with its memory.
      first.stop();
    }
    const parked = await partials.summary('p0#0/0');
    expect(parked?.owner).toBe(PARKED_OWNER);
    const parkingSeq = parked!.lastSeq;
    expect(first.coordinator.status().orphans).toEqual({ resumed: 0, completed: 0, returned: 0, lost: 0 });
    expect((await pool.progress()).returnedEntries).toBe(0);

    // The next leader scans at once (no startup grace): it finds the log parked and returns its sample.
    const second = await leader(partials, name);
    try {
      await expect
        .poll(() => second.coordinator.status().orphans.returned, { timeout: 20_000, message: 'the new leader never returned the parked sample' })
        .toBe(1);
      expect(second.coordinator.status().orphans).toEqual({ resumed: 0, completed: 0, returned: 1, lost: 0 });
      await expect.poll(() => second.coordinator.status().orphansWaiting, { timeout: 20_000 }).toBe(0);
      expect(second.logs.some((l) => typeof l.msg === 'string' && l.msg.startsWith("a parked log's sample had not been returned"))).toBe(true);
      expect(await pool.progress()).toMatchObject({ returnedEntries: 1, returnedSamples: 1, returnedPending: 1 });
      expect(second.poolLogs.filter((l) => l.msg === 'samples returned for regeneration').map((l) => l.key)).toEqual([`p0#0/0@${parkingSeq}`]);
    } finally {
      second.stop();
    }

    // A rollout claims the returned sample and completes the claim, the log still parked (it has not restarted it yet).
    const [back] = await pool.claim('ro-new', 1);
    expect(back).toMatchObject({ id: 'p0', groupId: 'p0#0', samples: [0], returned: true });
    expect(await pool.complete(back!)).toBe('ok');

    // A third leader's scan returns it under the same key: a duplicate, nothing queued, nothing counted.
    const third = await leader(partials, name);
    try {
      await expect
        .poll(() => third.poolLogs.some((l) => l.msg === 'samples already returned under this key: nothing queued' && l.key === `p0#0/0@${parkingSeq}`), {
          timeout: 20_000,
          message: 'the third leader never returned the sample under the parking key',
        })
        .toBe(true);
      await expect.poll(() => third.coordinator.status().orphansWaiting, { timeout: 20_000 }).toBe(0);
      expect(third.coordinator.status().orphans).toEqual({ resumed: 0, completed: 0, returned: 0, lost: 0 });
      expect(await pool.progress()).toMatchObject({ returnedEntries: 1, returnedPending: 0, returnedLeased: 0, returnedCompletions: 1 });
    } finally {
      third.stop();
    }
    expect(await pool.claim('ro-new', 1)).toEqual([]);

    // The rollout starts it again in its parked log: regenerated.
    const restarted = await partials.restart('ro-new', { ...start, weightVersion: 3 }, { from: PARKED_OWNER });
    restarted.release();
    expect((await partials.startOf('p0#0/0'))?.owner).toBe('ro-new');
    await partials.close();
  }, 90_000);
});
