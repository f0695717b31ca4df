/**
 * The experience buffer on a 3-node cluster (R3): its stream's leader SIGKILLed while two
 * writers write and a sampler samples. Nothing is lost, nothing is sampled twice, and every
 * client that sat on the killed node reconnects to another one.
 */
import { describe, expect, it } from 'vitest';
import { ExperienceSampler, ExperienceWriter } from '../../src/data/index.js';
import { trajectory } from '../data/helpers.js';
import { clusterFixture, reconnected, until } from './helpers.js';

const fx = clusterFixture();

describe('buffer stream leader killed (R3)', () => {
  it('loses no trajectory and samples none twice; every client on the dead node reconnects', async () => {
    const { cluster } = fx;
    const buffer = 'lk';
    const setup = await fx.client();
    await ExperienceWriter.open({ nc: setup, buffer, replicas: 3 });
    const leader = await cluster.streamLeader(`LAMINAR_EXP_${buffer}`);
    const other = cluster.nodes.find((n) => n !== leader)!;

    // Writer 1 and the sampler sit on the leader, writer 2 on a follower.
    const onLeader = [await fx.client(leader), await fx.client(leader)];
    const onFollower = await fx.client(other);
    const moved = onLeader.map((nc) => reconnected(nc));
    const writers = [
      await ExperienceWriter.open({ nc: onLeader[0]!, buffer, replicas: 3 }),
      await ExperienceWriter.open({ nc: onFollower, buffer, replicas: 3 }),
    ];
    const sampler = await ExperienceSampler.open({ nc: onLeader[1]!, buffer, batchSize: 8, prefetch: false });

    const PER_WRITER = 120;
    let written = 0;
    const writing = writers.map(async (w, k) => {
      const results = [];
      for (let i = 0; i < PER_WRITER; i++) {
        results.push(await w.write(trajectory({ id: `w${k}-${i}`, reward: i }, 16)));
        written++;
      }
      return results;
    });
    const sampled: string[] = [];
    let wrongPayloads = 0;
    const sampling = (async () => {
      while (sampled.length < 2 * PER_WRITER) {
        const batch = await sampler.sample({ timeoutMs: 30_000 });
        for (const item of batch.items) {
          sampled.push(item.id);
          // The payload is the one written for this id (tokens 100.. of trajectory()).
          if (item.tokens.length !== 16 || item.tokens[15] !== 115) wrongPayloads++;
        }
        batch.release();
      }
    })();

    // The kill lands while both writers are mid-run and the sampler has batches behind it.
    await until('a third of the trajectories written and a batch sampled', () => written >= (2 * PER_WRITER) / 3 && sampled.length > 0);
    const writtenAtKill = written;
    await leader.kill();
    const servers = await Promise.all(moved);
    for (const server of servers) expect(server).not.toBe(leader.url.replace('nats://', ''));

    const results = (await Promise.all(writing)).flat();
    await sampling;
    expect(writtenAtKill).toBeLessThan(2 * PER_WRITER - 10);
    expect(results.filter((r) => r.duplicate)).toEqual([]);
    expect(sampled.length).toBe(2 * PER_WRITER);
    expect(new Set(sampled).size).toBe(2 * PER_WRITER);
    expect(wrongPayloads).toBe(0);
    // A new leader was elected among the two that are left, and the sampler has nothing more.
    expect((await cluster.streamLeader(`LAMINAR_EXP_${buffer}`, { not: leader })).name).not.toBe(leader.name);
    expect(sampler.stats()).toMatchObject({ items: 0, corrupt: 0 });
    await sampler.close();

    // The killed node comes back and catches up with its replica of the buffer.
    await leader.restart();
    const leaderNow = await cluster.streamLeader(`LAMINAR_EXP_${buffer}`);
    await until('the restarted node holds the same replica as the leader', async () => {
      const [mine, theirs] = await Promise.all([cluster.streamState(leader, `LAMINAR_EXP_${buffer}`), cluster.streamState(leaderNow, `LAMINAR_EXP_${buffer}`)]);
      return mine !== null && theirs !== null && mine.lastSeq === theirs.lastSeq && mine.messages === theirs.messages;
    });
  });
});
