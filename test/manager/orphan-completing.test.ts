/**
 * The manager's orphan failover and a trajectory its rollout was completing when it died (or
 * hung in a server restart): the 'completing' marker is in the log and the record is still on its
 * way. Parked and returned then, the sample would be generated again while its record lands
 * anyway (issue #47). It is left to its completer, asked again after the pool's grace, and counted
 * completed once its completer has written and purged it: never returned to the prompt pool.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool } from '../../src/data/index.js';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { heldWriter, natsClient, redisClient, trajectory } from '../data/helpers.js';
import { orphanCoordinator } from '../helpers/orphans.js';

let nats: NatsServer;
let nc: NatsConnection;
let redisServer: RedisServer;
let redis: Redis;

beforeAll(async () => {
  nats = await startNatsServer({ jetstream: true });
  nc = await natsClient(nats.url);
  redisServer = await startRedisServer();
  redis = redisClient(redisServer.port);
});
afterAll(async () => {
  redis.disconnect();
  await redisServer.stop();
  await nc.close();
  await nats.stop();
});

describe('orphan failover: a trajectory being completed', () => {
  it('is not parked nor returned while its record may land, and is counted completed once it has', async () => {
    const name = 'orphancompleting';
    const prompts = await PromptPool.open({ redis, name, defaultGroupSize: 1 });
    await prompts.load([{ id: 'p0', payload: 'question' }]);
    const [claim] = await prompts.claim('ro-dead', 1);
    const writer = await ExperienceWriter.open({ nc, buffer: name, registry: new Registry() });
    const held = heldWriter(writer);
    // The dead rollout's pool, and the manager's: its grace short enough for the test to see it end,
    // long enough that the coordinator's first round falls inside it on a loaded machine (with 2 s
    // it did not always, at a load average of 45, and the orphan was returned as abandoned).
    const deadPool = await PartialPool.open({ nc, pool: name, writer: held.writer, registry: new Registry() });
    const partials = await PartialPool.open({ nc, pool: name, writer, completingGraceMs: 8000, registry: new Registry() });
    const id = 'p0#0/0';
    const t = await deadPool.start('ro-dead', { trajectoryId: id, promptId: 'p0', groupId: claim!.groupId, sampleIndex: 0, groupSize: 1, weightVersion: 2 });
    t.append([5, 6, 7], [-1, -1, -1]);
    const completion = deadPool.complete(t, trajectory({ id, promptId: 'p0', groupId: claim!.groupId, weightVersion: 2 }));
    await held.writing;

    const { coordinator, logs } = orphanCoordinator(nc, { partials, prompts, commandTimeoutMs: 1000, orphanWaitMs: 0, orphanScanMs: 60_000 });
    // No rollout of version 2 is alive: without the grace the orphan would be parked and returned at once.
    const ticker = setInterval(() => coordinator.tick([]), 50);
    try {
      await expect.poll(() => logs.some((l) => l.msg === 'orphan being completed: asked again later'), { timeout: 20_000 }).toBe(true);
      expect(coordinator.status().orphansWaiting).toBe(1);
      expect(await partials.summary(id)).toMatchObject({ owner: 'ro-dead', state: 'completing' });

      held.release();
      await expect(completion).resolves.toMatchObject({ duplicate: false });
      await expect.poll(() => coordinator.status().orphans.completed, { timeout: 20_000 }).toBe(1);
      expect(coordinator.status().orphans).toEqual({ resumed: 0, completed: 1, returned: 0, lost: 0 });
      expect(coordinator.status().orphansWaiting).toBe(0);
    } finally {
      clearInterval(ticker);
    }
    // Written once, and nothing went back to the prompt pool to be generated again.
    expect(await writer.has(id)).toBe(true);
    expect(await prompts.progress()).toMatchObject({ returnedEntries: 0 });
    await deadPool.close();
    await partials.close();
  }, 60_000);
});
