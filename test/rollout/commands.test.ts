/**
 * The rollout SDK's side of the manager's commands on real services: bad command input is
 * rejected and counted, a repack for another weight version is refused with its code, a
 * reinitialise rebuilds the engine and resumes every trajectory the rollout owns, and a rollout
 * that comes back under the same id is admitted again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Redis } from 'ioredis';
import { pack } from 'msgpackr';
import { Registry } from 'prom-client';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { PartialPool, PromptPool, ExperienceWriter } from '../../src/data/index.js';
import { SCHEMA_VERSION, commandReplySchema, decode, encode } from '../../src/control/schema.js';
import { controlNames } from '../../src/control/subjects.js';
import { Manager } from '../../src/manager/manager.js';
import { startSimRollout, type SimRollout } from '../../src/stand-ins/rollout/sim-rollout.js';
import { metricValue, natsClient, redisClient } from '../data/helpers.js';

let nats: NatsServer;
let redisServer: RedisServer;
let nc: NatsConnection;
let redis: Redis;

beforeAll(async () => {
  [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
  nc = await natsClient(nats.url);
  redis = redisClient(redisServer.port);
});
afterAll(async () => {
  redis.disconnect();
  await nc.close();
  await Promise.all([nats.stop(), redisServer.stop()]);
});

/** A leading manager (on its own connection) that declares members dead after 1 s of silence. */
async function quickManager(job: string, registry: Registry, leaseMs: number): Promise<{ manager: Manager; stop: () => Promise<void> }> {
  const managerNc = await natsClient(nats.url);
  const manager = new Manager({
    nc: managerNc,
    job,
    registry,
    leaseMs,
    suspectAfterMs: 500,
    deadAfterMs: 1000,
    tickMs: 50,
    rollouts: { partials: null, prompts: null, repackIntervalMs: 0 },
  });
  await manager.start();
  await manager.whenLeader();
  return {
    manager,
    stop: async () => {
      await manager.close();
      await managerNc.close();
    },
  };
}

async function rollout(job: string, id: string, registry: Registry, rnc: NatsConnection): Promise<SimRollout> {
  return startSimRollout({
    nc: rnc,
    redis,
    job,
    id,
    model: 'sim/policy',
    relaySocket: null,
    weightVersion: () => 4,
    promptPool: job,
    partialPool: job,
    buffer: job,
    heartbeatMs: 200,
    flushTokens: 16,
    flushMs: 100,
    // Long responses and a slow clock: the trajectories are still in flight when the commands come.
    profile: { kvCapacityTokens: 65_536, rooflineBatch: 64, maxRunning: 64, decodeStepMs: 20 },
    outputMedian: 4000,
    outputMax: 8000,
    p99OverMedian: 2,
    promptMedian: 16,
    batchPrompts: 2,
    timeScale: 1,
    seed: 5,
    reinitialiseMs: 200,
    registry,
  });
}

describe('rollout commands', () => {
  it("rejects bad commands, refuses another version's repack, and resumes everything after a reinitialise", async () => {
    const job = 'cmds';
    const prompts = await PromptPool.open({ redis, name: job });
    await prompts.load([
      { id: 'a', payload: 1, n: 3 },
      { id: 'b', payload: 2, n: 3 },
    ]);
    const writer = await ExperienceWriter.open({ nc, buffer: job, groups: prompts });
    const partials = await PartialPool.open({ nc, pool: job, writer });
    const registry = new Registry();
    const rnc = await natsClient(nats.url);
    const sim = await rollout(job, 'ro-c', registry, rnc);
    const subject = controlNames(job).member('ro-c');
    try {
      await expect.poll(() => sim.client.owned.size, { timeout: 15_000 }).toBe(6);

      // Garbage, a foreign schema version and a command of an unknown type: dropped and counted.
      nc.publish(subject, new Uint8Array([0xc1, 0xff, 0x00]));
      nc.publish(subject, pack({ v: 99, t: 'reinitialise', reason: 'x' }));
      nc.publish(subject, encode({ v: SCHEMA_VERSION, t: 'format-disk' }));
      await expect.poll(async () => metricValue(registry, 'laminar_rollout_control_rejected_total'), { timeout: 5000 }).toBeGreaterThanOrEqual(1);
      expect(await metricValue(registry, 'laminar_rollout_control_rejected_total', { code: 'ERR_CONTROL_DECODE' })).toBe(1);
      expect(await metricValue(registry, 'laminar_rollout_control_rejected_total', { code: 'ERR_CONTROL_SCHEMA_VERSION' })).toBe(1);
      expect(await metricValue(registry, 'laminar_rollout_control_rejected_total', { code: 'ERR_CONTROL_SCHEMA' })).toBe(1);

      // A repack for a weight version this rollout does not generate with: refused, nothing moves.
      const refused = decode(
        commandReplySchema,
        (await nc.request(subject, encode({ v: SCHEMA_VERSION, t: 'repack-out', repack: 'r1', to: 'ro-x', version: 3 }), { timeout: 5000 })).data,
        'reply',
      );
      expect(refused).toMatchObject({ t: 'failed', code: 'ERR_VERSION_MISMATCH' });
      expect(sim.client.owned.size).toBe(6);

      // Reinitialise: the engine is rebuilt and every trajectory resumes from the partial pool.
      const before = new Map([...sim.client.owned.values()].map((t) => [t.trajectoryId, t.generated]));
      const done = decode(
        commandReplySchema,
        (await nc.request(subject, encode({ v: SCHEMA_VERSION, t: 'reinitialise', reason: 'test' }), { timeout: 10_000 })).data,
        'reply',
      );
      expect(done).toMatchObject({ t: 'done', taken: 6 });
      expect([...sim.client.owned.keys()].sort()).toEqual([...before.keys()].sort());
      for (const t of sim.client.owned.values()) {
        // Every token generated before the command was stored and comes back.
        expect(t.resumedFrom, 'resumed from what the pool held').toBeGreaterThanOrEqual(Math.max(1, before.get(t.trajectoryId)!));
      }
      await expect.poll(() => sim.engine.load().running, { timeout: 5000 }).toBe(6);
      expect((await partials.list('ro-c')).length).toBe(6);
    } finally {
      await sim.close();
      await rnc.close();
      await partials.close();
    }
  }, 60_000);

  it('does not declare members dead when its own event loop was held up past the limit', async () => {
    const job = 'held';
    const registry = new Registry();
    // (A lease longer than the hold-up: the manager stays the leader throughout.)
    const { manager, stop } = await quickManager(job, registry, 10_000);
    const rnc = await natsClient(nats.url);
    const sim = await rollout(job, 'ro-h', new Registry(), rnc);
    try {
      await expect.poll(() => manager.status().rollouts.find((r) => r.id === 'ro-h')?.health, { timeout: 10_000 }).toBe('alive');
      // 1.5 s without a turn of the event loop, in its check phase: timers come next, before the
      // I/O (the rollout's heartbeats) that arrived meanwhile is read.
      await new Promise<void>((resolve) =>
        setImmediate(() => {
          const until = Date.now() + 1500;
          while (Date.now() < until) {
            // held up
          }
          resolve();
        }),
      );
      const heldUntil = Date.now();
      // A heartbeat read after the hold-up: the manager's timers (its tick, which saw the silence)
      // ran before that I/O, so the tick after the hold-up has had its say.
      const heardAt = (): number => {
        const m = manager.status().members.find((x) => x.id === 'ro-h');
        return m ? Date.now() - m.heardMsAgo : 0;
      };
      await expect.poll(heardAt, { timeout: 10_000 }).toBeGreaterThan(heldUntil);
      expect(manager.status().rollouts.find((r) => r.id === 'ro-h')?.health).toBe('alive');
      // Not even for a moment (a member heard again after being declared dead is alive again).
      expect(await metricValue(registry, 'laminar_manager_deaths_total', { kind: 'rollout' })).toBe(0);
    } finally {
      await sim.close();
      await rnc.close();
      await stop();
    }
  }, 60_000);

  it('admits a rollout that comes back under its id after being declared dead', async () => {
    const job = 'back';
    const registry = new Registry();
    const { manager, stop } = await quickManager(job, registry, 1000);
    const prompts = await PromptPool.open({ redis, name: job });
    await prompts.load([{ id: 'a', payload: 1, n: 1 }]);
    let rnc = await natsClient(nats.url);
    let sim = await rollout(job, 'ro-b', new Registry(), rnc);
    try {
      await expect.poll(() => manager.status().rollouts.find((r) => r.id === 'ro-b')?.health, { timeout: 10_000 }).toBe('alive');
      await sim.engine.close();
      await rnc.close();
      await expect.poll(() => manager.status().rollouts.find((r) => r.id === 'ro-b')?.health, { timeout: 10_000 }).toBe('dead');
      expect(await metricValue(registry, 'laminar_manager_reinitialise_total')).toBeGreaterThanOrEqual(1);
      rnc = await natsClient(nats.url);
      sim = await rollout(job, 'ro-b', new Registry(), rnc);
      await expect.poll(() => manager.status().rollouts.find((r) => r.id === 'ro-b')?.health, { timeout: 10_000 }).toBe('alive');
    } finally {
      await sim.close();
      await rnc.close();
      await stop();
    }
  }, 60_000);
});
