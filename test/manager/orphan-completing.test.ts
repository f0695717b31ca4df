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
import { PARKED_OWNER } from '../../src/data/partial/log-codec.js';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { pino } from 'pino';
import { SCHEMA_VERSION, commandSchema, decode, encode } from '../../src/control/schema.js';
import type { RolloutView } from '../../src/manager/rollouts/coordinator.js';
import { Ownership } from '../../src/rollout/ownership.js';
import { RolloutMetrics } from '../../src/rollout/metrics.js';
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

/**
 * Prompt p0's sample p0#0/0 (weight version 2), claimed and started by `ro-dead`, which then
 * began its completion (the 'completing' marker) and stops before the record: its writer holds
 * the write until `held.release()`. `partials` is the manager's (and live rollouts') pool, with
 * the completion grace `completingGraceMs`.
 */
async function completingWhenItsRolloutDied(name: string, completingGraceMs: number) {
  const prompts = await PromptPool.open({ redis, name, defaultGroupSize: 1 });
  await prompts.load([{ id: 'p0', payload: 'question' }]);
  const [claim] = await prompts.claim('ro-dead', 1);
  const writer = await ExperienceWriter.open({ nc, buffer: name, registry: new Registry() });
  const held = heldWriter(writer);
  const deadPool = await PartialPool.open({ nc, pool: name, writer: held.writer, registry: new Registry() });
  const partials = await PartialPool.open({ nc, pool: name, writer, completingGraceMs, registry: new Registry() });
  const id = 'p0#0/0';
  const t = await deadPool.start('ro-dead', { trajectoryId: id, promptId: 'p0', groupId: claim!.groupId, sampleIndex: 0, groupSize: 1, weightVersion: 2 });
  t.append([5, 6, 7], [-1, -1, -1]);
  const completion = deadPool.complete(t, trajectory({ id, promptId: 'p0', groupId: claim!.groupId, weightVersion: 2 }));
  await held.writing;
  return { prompts, writer, held, deadPool, partials, id, completion };
}

describe('orphan failover: a trajectory being completed', () => {
  it('is not parked nor returned while its record may land, and is counted completed once it has', async () => {
    // The manager's grace: short enough for the test to see it end, long enough that the
    // coordinator's first round falls inside it on a loaded machine (with 2 s it did not always, at
    // a load average of 45, and the orphan was returned as abandoned).
    const { prompts, writer, held, deadPool, partials, id, completion } = await completingWhenItsRolloutDied('orphancompleting', 8000);

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

  it('sent to a live rollout of its version while being completed, is asked again after the grace, not at the backstop scan', async () => {
    // Its owner died between the 'completing' marker and the record: the record never lands. The
    // live rollout's take-over leaves it to its completer at first (its grace is not over); the
    // manager used to drop it from its orphans then, and only the backstop scan (60 s) found it
    // again: a successor manager's take-over waited a minute for it under load, in CI.
    const { prompts, deadPool, partials, id, completion } = await completingWhenItsRolloutDied('orphancompletingresume', 3000);
    completion.catch(() => undefined);

    // The live rollout of version 2: its own take-over logic answers each repack-in.
    const ownership = new Ownership({
      rolloutId: 'ro-live',
      partials,
      prompts,
      metrics: new RolloutMetrics(new Registry()),
      log: pino({ level: 'silent' }),
      tasks: new Map(),
      weightVersion: () => 2,
      adopt: (partial) => {
        throw new Error(`${partial.trajectoryId} resumed although its response is whole`);
      },
      resume: () => Promise.resolve(),
    });
    const asked: Array<{ completing: number }> = [];
    const live = nc.subscribe('test.member.ro-live', {
      callback: (_err, msg) => {
        const command = decode(commandSchema, msg.data, 'command');
        if (command.t !== 'repack-in') return;
        void ownership.takeOverAndResume(command.trajectories, command.from, 'version_mismatch').then(({ taken, completed, lost, returned, completing }) => {
          asked.push({ completing: completing.length });
          msg.respond(encode({ v: SCHEMA_VERSION, t: 'done', moved: [], taken, completed, lost: lost + returned, completing }));
        });
      },
    });
    const view: RolloutView = {
      id: 'ro-live',
      health: 'alive',
      load: { state: 'generating', model: 'm', weightVersion: 2, kvUsed: 0.2, kvPrev: 0.2, running: 0, waiting: 0, owned: 0, tokensPerSecond: 100 },
    };
    // Orphans never expire here and the backstop scan is a minute away: only the grace brings the second ask.
    const { coordinator } = orphanCoordinator(nc, { partials, prompts, commandTimeoutMs: 2000, orphanWaitMs: 600_000, orphanScanMs: 60_000 });
    const ticker = setInterval(() => coordinator.tick([view]), 50);
    try {
      await expect.poll(() => asked.length, { timeout: 20_000 }).toBeGreaterThanOrEqual(2);
      // Left to its completer the first time; found finished once the grace was over, and its sample returned.
      expect(asked.slice(0, 2)).toEqual([{ completing: 1 }, { completing: 0 }]);
      await expect.poll(() => coordinator.status().orphansWaiting, { timeout: 10_000 }).toBe(0);
      expect(await prompts.progress()).toMatchObject({ returnedEntries: 1 });
      expect(await partials.summary(id)).toMatchObject({ owner: PARKED_OWNER });
    } finally {
      clearInterval(ticker);
      live.unsubscribe();
    }
    await deadPool.close();
    await partials.close();
  }, 60_000);
});
