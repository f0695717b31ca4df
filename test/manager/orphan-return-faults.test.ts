/**
 * Returning an orphan's sample to the prompt pool when that call fails after the log was parked,
 * on a real nats-server and a real Redis master with one replica: the manager's pool waits for
 * the replica (`replicas: 1`), and the replica is stopped (SIGSTOP) while the manager returns the
 * sample. The write stands on the master, but the call fails with ERR_NOT_REPLICATED. The return
 * stays pending and is retried under the same key once the replica is back: the sample is queued
 * exactly once, counted `returned` (not `lost`), and a rollout regenerates it in its parked log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { PARKED_OWNER, PromptPool } from '../../src/data/index.js';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { metricValue, natsClient, redisClient } from '../data/helpers.js';
import { claimedOrphan, orphanCoordinator } from '../helpers/orphans.js';

let nats: NatsServer;
let nc: NatsConnection;
let master: RedisServer;
let replica: RedisServer;
let redis: Redis;

beforeAll(async () => {
  nats = await startNatsServer({ jetstream: true });
  nc = await natsClient(nats.url);
  master = await startRedisServer();
  replica = await startRedisServer({ replicaOf: master.port });
  redis = redisClient(master.port);
  // WAIT blocks until the replica acknowledges the write before it: it has synced and answers.
  await redis.set('synced', '1');
  for (let i = 0; (await redis.wait(1, 1000)) < 1; i++) if (i === 30) throw new Error('the replica never caught up with the master');
});
afterAll(async () => {
  redis.disconnect();
  await replica.stop();
  await master.stop();
  await nc.close();
  await nats.stop();
});

/** Stops or resumes the replica: stopped, it acknowledges nothing, so every WAIT of the manager's pool falls short. */
function signalReplica(sig: 'SIGSTOP' | 'SIGCONT'): void {
  process.kill(replica.pid!, sig);
}

describe('orphan failover: a return to the prompt pool that fails after the log is parked', () => {
  it('retries the return under the same key: the sample is queued once, counted returned, and regenerated', async () => {
    const name = 'orphanreturn';
    // The dead rollout claimed the prompt and started its one sample.
    const { pool, partials, start } = await claimedOrphan(redis, nc, name);

    // The manager's pool waits for the replica (what `?replicas=1` asks). Its open is itself a
    // replicated write, while the replica still runs: the bound is generous, since on the loaded
    // machine a healthy replica acknowledged later than 300 ms and the open failed (a clean-clone
    // run, four suite files at a time). Stopped, the replica acknowledges nothing within any bound.
    const managerRedis = redisClient(master.port);
    const managerPool = await PromptPool.open({ redis: managerRedis, name, replicas: 1, replicaTimeoutMs: 2000, registry: new Registry() });
    const { coordinator, registry, logs } = orphanCoordinator(nc, {
      partials,
      prompts: managerPool,
      commandTimeoutMs: 1000,
      // No rollout of version 2 is alive: the orphan is parked and returned at once.
      orphanWaitMs: 0,
      orphanScanMs: 60_000,
    });
    signalReplica('SIGSTOP');
    let stopped = true;
    const ticker = setInterval(() => coordinator.tick([]), 50);
    try {
      // The return reached the master (and failed for want of the replica's acknowledgement).
      await expect.poll(async () => (await pool.progress()).returnedEntries, { timeout: 20_000, message: 'the sample never reached the master' }).toBe(1);
      await expect
        .poll(() => logs.some((l) => l.code === ErrorCodes.NOT_REPLICATED) || coordinator.status().orphans.lost > 0, {
          timeout: 20_000,
          message: 'the failed return was neither logged nor counted',
        })
        .toBe(true);
      signalReplica('SIGCONT');
      stopped = false;
      await expect
        .poll(() => coordinator.status().orphans.returned + coordinator.status().orphans.lost, { timeout: 20_000, message: 'the orphan was never settled' })
        .toBe(1);
      expect(coordinator.status().orphans).toEqual({ resumed: 0, completed: 0, returned: 1, lost: 0 });
      expect(coordinator.status().orphansWaiting).toBe(0);
      expect(await metricValue(registry, 'laminar_manager_orphan_return_failures_total', { code: ErrorCodes.NOT_REPLICATED })).toBeGreaterThanOrEqual(1);
      expect(logs.some((l) => l.msg === "cannot return a parked orphan's sample to the prompt pool (retrying)")).toBe(true);
      // Queued once, though the call was made at least twice.
      expect(await pool.progress()).toMatchObject({ returnedEntries: 1, returnedSamples: 1, returnedPending: 1 });
    } finally {
      clearInterval(ticker);
      if (stopped) signalReplica('SIGCONT');
    }

    // A rollout claims the returned sample and starts it again in its parked log: regenerated.
    const [back] = await pool.claim('ro-new', 1);
    expect(back).toMatchObject({ id: 'p0', groupId: 'p0#0', samples: [0], returned: true });
    const restarted = await partials.restart('ro-new', { ...start, weightVersion: 3 }, { from: PARKED_OWNER });
    restarted.release();
    expect((await partials.startOf('p0#0/0'))?.owner).toBe('ro-new');
    expect(await pool.complete(back!)).toBe('ok');
    expect(await pool.progress()).toMatchObject({ returnedEntries: 1, returnedPending: 0, returnedLeased: 0, returnedCompletions: 1 });
    expect(await pool.claim('ro-new', 1)).toEqual([]);
    managerRedis.disconnect();
    await partials.close();
  }, 90_000);
});
