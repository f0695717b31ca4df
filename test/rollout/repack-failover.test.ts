/**
 * Rollout manager part 2 on real services (nats-server with JetStream, redis-server): simulated
 * rollouts on the real SDK, the manager's repack and rollout failover. Every test ends with the
 * same ledger: each sample of each prompt is in the experience buffer exactly once, nothing is
 * left in the partial pool, and no writer saw a duplicate.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { ExperienceWriter, PartialPool, PromptPool, groupIdOf } from '../../src/data/index.js';
import { Manager } from '../../src/manager/manager.js';
import { startSimRollout, type SimRollout } from '../../src/stand-ins/rollout/sim-rollout.js';
import { trajectoryIdOf } from '../../src/rollout/ids.js';
import { metricValue, natsClient, redisClient } from '../data/helpers.js';

let nats: NatsServer;
let redisServer: RedisServer;
let nc: NatsConnection;
let redis: Redis;
let run = 0;
const cleanup: Array<() => Promise<void>> = [];

beforeAll(async () => {
  [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer({ appendonly: true, appendfsync: 'always' })]);
  nc = await natsClient(nats.url);
  redis = redisClient(redisServer.port);
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => undefined);
});
afterAll(async () => {
  redis.disconnect();
  await nc.close();
  await Promise.all([nats.stop(), redisServer.stop()]);
});

interface Job {
  job: string;
  pool: string;
  registry: Registry;
  manager: Manager;
  prompts: PromptPool;
  partials: PartialPool;
  writer: ExperienceWriter;
  rollouts: Map<string, { sim: SimRollout; registry: Registry; nc: NatsConnection }>;
  version: { current: number };
}

async function job(options: { prompts: number; n: number; repackIntervalMs?: number; orphanWaitMs?: number }): Promise<Job> {
  const name = `j${++run}`;
  const registry = new Registry();
  const prompts = await PromptPool.open({ redis, name, registry: new Registry() });
  await prompts.load(Array.from({ length: options.prompts }, (_, i) => ({ id: `p${i}`, payload: { q: i }, n: options.n })));
  const writer = await ExperienceWriter.open({ nc, buffer: name, groups: prompts, registry: new Registry() });
  const partials = await PartialPool.open({ nc, pool: name, writer, registry: new Registry() });
  const managerNc = await natsClient(nats.url);
  const manager = new Manager({
    nc: managerNc,
    job: name,
    registry,
    leaseMs: 1000,
    suspectAfterMs: 800,
    deadAfterMs: 1500,
    tickMs: 50,
    rollouts: {
      partials,
      prompts,
      limits: { cMax: 0.99, rooflineBatch: 64 },
      repackIntervalMs: options.repackIntervalMs ?? 400,
      orphanWaitMs: options.orphanWaitMs ?? 30_000,
      startupGraceMs: 0,
      commandTimeoutMs: 10_000,
    },
  });
  await manager.start();
  await manager.whenLeader(10_000);
  const j: Job = { job: name, pool: name, registry, manager, prompts, partials, writer, rollouts: new Map(), version: { current: 1 } };
  cleanup.push(async () => {
    for (const r of j.rollouts.values()) {
      await r.sim.close().catch(() => undefined);
      await r.nc.close().catch(() => undefined);
    }
    await manager.close();
    await partials.close();
    await managerNc.close();
  });
  return j;
}

async function addRollout(j: Job, id: string, seed: number): Promise<SimRollout> {
  const rnc = await natsClient(nats.url);
  const registry = new Registry();
  const sim = await startSimRollout({
    nc: rnc,
    redis,
    job: j.job,
    id,
    model: 'sim/policy',
    relaySocket: null,
    weightVersion: () => j.version.current,
    promptPool: j.pool,
    partialPool: j.pool,
    buffer: j.pool,
    heartbeatMs: 200,
    flushTokens: 32,
    flushMs: 200,
    // A small engine and a long tail: a batch ends with a few long trajectories per rollout.
    profile: { kvCapacityTokens: 16_384, rooflineBatch: 64, maxRunning: 64, decodeStepMs: 20 },
    outputMedian: 96,
    outputMax: 1536,
    p99OverMedian: 10,
    promptMedian: 32,
    batchPrompts: 4,
    timeScale: 15,
    seed,
    registry,
  });
  j.rollouts.set(id, { sim, registry, nc: rnc });
  return sim;
}

/** Prompts added to a job at a time while a test waits for the manager to act on a long tail (two rollouts' batches). */
const FEED_PROMPTS = 8;
/** The most prompts a job is fed in all: far more long tails than a working repack needs. */
const MAX_FED_PROMPTS = 200;

/** Every sample of every prompt is in the buffer, once; the partial pool is empty. */
async function expectLedger(j: Job, prompts: number, n: number, timeoutMs = 90_000): Promise<void> {
  const ids = Array.from({ length: prompts }, (_, p) => Array.from({ length: n }, (_, s) => trajectoryIdOf(groupIdOf(`p${p}`, 0), s))).flat();
  await expect.poll(async () => (await Promise.all(ids.map((id) => j.writer.has(id)))).filter((x) => !x).length, { timeout: timeoutMs, interval: 250 }).toBe(0);
  await expect.poll(async () => (await j.partials.list()).length, { timeout: 10_000 }).toBe(0);
  let duplicates = 0;
  for (const r of j.rollouts.values()) duplicates += await metricValue(r.registry, 'laminar_buffer_writes_total', { result: 'duplicate' });
  expect(duplicates, 'a trajectory was written twice').toBe(0);
}

describe('rollouts: repack and failover (real NATS and Redis)', () => {
  it('repacks long-tail rollouts of one weight version, and every trajectory completes exactly once', async () => {
    const j = await job({ prompts: 24, n: 4 });
    for (let i = 0; i < 4; i++) await addRollout(j, `ro${i}`, i + 1);
    // A move needs two rollouts of the version in their long tails at one planning round, each with
    // less KV in use than at the round before. How many rounds a batch's tail spans is up to the
    // machine (a loaded one slows the simulated engines, so fewer trajectories finish between two
    // rounds), so the job is not let run out of work before a move: the pool gets more prompts
    // whenever it runs low, until the manager reports a move done. A broken repack never gets there.
    let prompts = 24;
    await expect
      .poll(
        async () => {
          const moves = await metricValue(j.registry, 'laminar_manager_repack_moves_total', { result: 'done' });
          if (moves === 0 && prompts < MAX_FED_PROMPTS && (await j.prompts.progress()).pending < FEED_PROMPTS) {
            await j.prompts.load(Array.from({ length: FEED_PROMPTS }, (_, i) => ({ id: `p${prompts + i}`, payload: { q: prompts + i }, n: 4 })));
            prompts += FEED_PROMPTS;
          }
          return moves;
        },
        { timeout: 60_000, interval: 100, message: 'no repack happened' },
      )
      .toBeGreaterThan(0);
    await expectLedger(j, prompts, 4);
    expect(await metricValue(j.registry, 'laminar_manager_repack_moves_total', { result: 'done' }), 'no repack happened').toBeGreaterThan(0);
    expect(await metricValue(j.registry, 'laminar_manager_repack_trajectories_total', { outcome: 'resumed' })).toBeGreaterThan(0);
    let resumed = 0;
    for (const r of j.rollouts.values()) resumed += await metricValue(r.registry, 'laminar_rollout_tasks_total', { outcome: 'resumed' });
    expect(resumed).toBeGreaterThan(0);
    expect(await metricValue(j.registry, 'laminar_manager_repack_moves_total', { result: 'failed' })).toBe(0);
  }, 180_000);

  it("resumes a dead rollout's trajectories on a live rollout of the same weight version", async () => {
    const j = await job({ prompts: 16, n: 4, repackIntervalMs: 0 });
    const victim = await addRollout(j, 'ro0', 11);
    await addRollout(j, 'ro1', 12);
    await expect.poll(() => victim.client.owned.size, { timeout: 20_000 }).toBeGreaterThan(0);
    // A crash: the engine stops and the member goes silent, no flush, no hand-over.
    await victim.engine.close();
    await j.rollouts.get('ro0')!.nc.close();
    j.rollouts.delete('ro0');
    // The death itself sends the manager looking (dead-after is 1.5 s here), not its once-a-minute backstop scan.
    await expect.poll(() => metricValue(j.registry, 'laminar_manager_orphans_total', { outcome: 'resumed' }), { timeout: 15_000 }).toBeGreaterThan(0);
    await expectLedger(j, 16, 4);
    expect(await metricValue(j.registry, 'laminar_manager_deaths_total', { kind: 'rollout', cause: 'heartbeat' })).toBe(1);
  }, 120_000);

  it('loses and duplicates nothing when nats-server and redis-server are SIGKILLed and restarted mid-run (repack on)', async () => {
    const j = await job({ prompts: 24, n: 4 });
    for (let i = 0; i < 3; i++) await addRollout(j, `ro${i}`, 31 + i);
    await expect
      .poll(
        async () =>
          (await Promise.all([...j.rollouts.values()].map((r) => metricValue(r.registry, 'laminar_buffer_writes_total', { result: 'ok' })))).reduce(
            (a, b) => a + b,
            0,
          ),
        { timeout: 30_000 },
      )
      .toBeGreaterThan(10);
    await nats.restart({ kill: true });
    // And the prompt pool's redis-server (AOF on), while rollouts claim.
    await redisServer.restart({ kill: true });
    await expectLedger(j, 24, 4);
  }, 150_000);

  it("a manager that takes over mid-run finds a dead rollout's trajectories and resumes them", async () => {
    const j = await job({ prompts: 16, n: 4, repackIntervalMs: 0 });
    const victim = await addRollout(j, 'ro0', 41);
    await addRollout(j, 'ro1', 42);
    await expect.poll(() => victim.client.owned.size, { timeout: 20_000 }).toBeGreaterThan(0);
    // The active manager stops; the rollout dies while no manager runs; a new one takes over.
    await j.manager.close();
    await victim.engine.close();
    await j.rollouts.get('ro0')!.nc.close();
    j.rollouts.delete('ro0');
    const registry = new Registry();
    const nc2 = await natsClient(nats.url);
    const successor = new Manager({
      nc: nc2,
      job: j.job,
      registry,
      leaseMs: 1000,
      suspectAfterMs: 800,
      deadAfterMs: 1500,
      tickMs: 50,
      rollouts: { partials: j.partials, prompts: j.prompts, repackIntervalMs: 0, commandTimeoutMs: 10_000 },
    });
    cleanup.push(async () => {
      await successor.close();
      await nc2.close();
    });
    await successor.start();
    await successor.whenLeader(10_000);
    await expectLedger(j, 16, 4);
    expect(await metricValue(registry, 'laminar_manager_orphans_total', { outcome: 'resumed' })).toBeGreaterThan(0);
  }, 120_000);

  it('returns samples to the prompt pool when no rollout has their weight version, and they are generated again', async () => {
    const j = await job({ prompts: 8, n: 2, repackIntervalMs: 0, orphanWaitMs: 1000 });
    const victim = await addRollout(j, 'ro0', 21);
    await expect.poll(() => victim.client.owned.size, { timeout: 20_000 }).toBeGreaterThan(0);
    await victim.engine.close();
    await j.rollouts.get('ro0')!.nc.close();
    j.rollouts.delete('ro0');
    // The only rollout left generates with a newer version: nobody can resume version 1.
    j.version.current = 2;
    await addRollout(j, 'ro1', 22);
    await expectLedger(j, 8, 2);
    expect(await metricValue(j.registry, 'laminar_manager_orphans_total', { outcome: 'returned' })).toBeGreaterThan(0);
    expect(await metricValue(j.registry, 'laminar_manager_orphans_total', { outcome: 'resumed' })).toBe(0);
  }, 120_000);
});
