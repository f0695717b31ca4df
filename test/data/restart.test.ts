/**
 * Restarts of the services and of the sampler lose nothing, and the whole trajectory path
 * works end to end: claim prompts (Redis), stream partial responses, complete into the
 * experience buffer, sample whole GRPO groups.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Redis } from 'ioredis';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { ExperienceSampler, ExperienceWriter, PartialPool, PromptPool, wholeGroups } from '../../src/data/index.js';
import { natsClient, redisClient, trajectory } from './helpers.js';

let nats: NatsServer;
let redis: RedisServer;
let nc: NatsConnection;
let rc: Redis;

beforeAll(async () => {
  [nats, redis] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer({ appendonly: true, appendfsync: 'always' })]);
  nc = await natsClient(nats.url);
  rc = redisClient(redis.port);
});
afterAll(async () => {
  rc.disconnect();
  await nc.close();
  await Promise.all([nats.stop(), redis.stop()]);
});

describe('restarts', () => {
  it('a killed nats-server (file storage) loses no experience; writes retry through the outage', async () => {
    const w = await ExperienceWriter.open({ nc, buffer: 'r1' });
    for (let i = 0; i < 20; i++) await w.write(trajectory({ id: `k${i}` }));
    await nats.kill();
    const during = w.write(trajectory({ id: 'k20' })); // retried until the server is back
    await new Promise((r) => setTimeout(r, 300));
    await nats.restart();
    expect((await during).duplicate).toBe(false);
    const s = await ExperienceSampler.open({ nc, buffer: 'r1', batchSize: 21, prefetch: false });
    const b = await s.sample({ timeoutMs: 10_000 });
    expect(b.items.map((i) => i.id)).toEqual(Array.from({ length: 21 }, (_, i) => `k${i}`));
    await s.close();
  });

  it('a restarted sampler rebuilds its index from the stream, without what was sampled', async () => {
    const w = await ExperienceWriter.open({ nc, buffer: 'r2' });
    for (let i = 0; i < 10; i++) await w.write(trajectory({ id: `s${i}`, priority: i }));
    const s1 = await ExperienceSampler.open({ nc, buffer: 'r2', batchSize: 4, prefetch: false });
    expect((await s1.sample()).items.map((i) => i.id)).toEqual(['s0', 's1', 's2', 's3']);
    await s1.close();
    const s2 = await ExperienceSampler.open({ nc, buffer: 'r2', batchSize: 4 });
    expect(s2.entries().map((e) => [e.id, e.priority])).toEqual(Array.from({ length: 6 }, (_, i) => [`s${i + 4}`, i + 4]));
    expect((await s2.sample()).items.map((i) => i.id)).toEqual(['s4', 's5', 's6', 's7']);
    // The sampler keeps following the stream through a server restart.
    await nats.restart();
    for (let i = 10; i < 12; i++) await w.write(trajectory({ id: `s${i}` }));
    expect((await s2.sample({ timeoutMs: 15_000 })).items.map((i) => i.id)).toEqual(['s8', 's9', 's10', 's11']);
    await s2.close();
  });

  it('partial responses survive a nats-server kill', async () => {
    const p = await PartialPool.open({ nc, pool: 'r3', flushTokens: 2 });
    const t = await p.start('r', { trajectoryId: 'pt', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, weightVersion: 1 });
    t.append([1, 2, 3], [0, 0, 0]);
    await t.flush();
    await nats.restart({ kill: true });
    expect(Array.from((await p.read('pt'))!.tokens)).toEqual([1, 2, 3]);
    t.append([4, 5], [0, 0]);
    await t.flush();
    expect(Array.from((await p.read('pt'))!.tokens)).toEqual([1, 2, 3, 4, 5]);
    await p.close();
  });
});

describe('the trajectory path end to end', () => {
  it('claim -> stream partials -> complete -> sample whole groups, through a redis restart', async () => {
    const prompts = await PromptPool.open({ redis: rc, name: 'e2e', defaultGroupSize: 2 });
    await prompts.load([
      { id: 'q1', payload: 'one' },
      { id: 'q2', payload: 'two' },
    ]);
    const writer = await ExperienceWriter.open({ nc, buffer: 'e2e', groups: prompts, maxWeightVersion: () => 5 });
    const partial = await PartialPool.open({ nc, pool: 'e2e', writer, flushTokens: 8 });
    const sampler = await ExperienceSampler.open({ nc, buffer: 'e2e', batchSize: 2, strategy: wholeGroups(), trainerVersion: 5 });

    const claims = await prompts.claim('rollout-1', 2);
    await redis.restart({ kill: true });
    for (const c of claims) {
      for (let i = 0; i < c.n; i++) {
        const id = `${c.groupId}/${i}`;
        const t = await partial.start('rollout-1', { trajectoryId: id, promptId: c.id, groupId: c.groupId, sampleIndex: i, groupSize: c.n, weightVersion: 4 });
        t.append([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], new Array(12).fill(-0.5));
        await partial.complete(t, trajectory({ id, promptId: c.id, groupId: c.groupId, sampleIndex: i, groupSize: c.n, weightVersion: 4 }));
      }
      expect(await prompts.complete(c)).toBe('ok');
    }
    expect(await partial.list()).toEqual([]);
    const b1 = await sampler.sample({ timeoutMs: 5000 });
    const b2 = await sampler.sample({ timeoutMs: 5000 });
    expect([b1.groups, b2.groups]).toEqual([['q1#0'], ['q2#0']]);
    expect(b1.staleness).toMatchObject({ min: 1, max: 1 });
    expect(await prompts.progress()).toMatchObject({ completions: 2, finished: true });
    await Promise.all([sampler.close(), partial.close()]);
  });
});
