/**
 * A node of the 3-node cluster cut off and healed: the buffer stream's leader stops answering
 * (SIGSTOP: its routes and its clients get no reply, as when the network drops its packets) while
 * writers write. The two others elect a leader and every write succeeds while the node is still
 * away; once it is back (SIGCONT) it catches up with the writes it missed, and a sampler reads
 * each trajectory exactly once.
 *
 * Why SIGSTOP and not a firewall rule: this machine has neither iptables nor nft, and a port rule
 * on loopback could not isolate the node anyway: the route connections it opens to the others go
 * out from ephemeral ports that no rule on its own ports matches. A stopped process drops nothing
 * on the floor (the kernel still accepts bytes for it), but to its peers and clients it is as
 * silent as a partitioned node, which is what Raft and the clients' pings react to.
 */
import { describe, expect, it } from 'vitest';
import { ExperienceSampler, ExperienceWriter, type WriteResult } from '../../src/data/index.js';
import { trajectory } from '../data/helpers.js';
import { clusterFixture, reconnected, until } from './helpers.js';

const fx = clusterFixture();

describe('a node partitioned away and healed (R3)', () => {
  it('writes succeed on the majority while it is away; back, it catches up', async () => {
    const { cluster } = fx;
    const buffer = 'pt';
    const stream = `LAMINAR_EXP_${buffer}`;
    const setup = await fx.client();
    const first = await ExperienceWriter.open({ nc: setup, buffer, replicas: 3 });
    const cut = await cluster.streamLeader(stream);
    const majority = cluster.nodes.filter((n) => n !== cut);
    for (let i = 0; i < 20; i++) await first.write(trajectory({ id: `before-${i}` }));

    // One writer on the node that will be cut off, one on the majority.
    const onCut = await fx.client(cut);
    const onMajority = await fx.client(majority[0]);
    const left = reconnected(onCut);
    const writers = [await ExperienceWriter.open({ nc: onCut, buffer }), await ExperienceWriter.open({ nc: onMajority, buffer })];

    cut.pause();
    const during: WriteResult[] = [];
    await Promise.all(
      writers.map(async (w, k) => {
        for (let i = 0; i < 40; i++) during.push(await w.write(trajectory({ id: `during-${k}-${i}` })));
      }),
    );
    // All of them stored while the node is still away: the majority took them.
    expect(cut.paused).toBe(true);
    expect(during.filter((r) => r.duplicate)).toEqual([]);
    const newLeader = await cluster.streamLeader(stream, { not: cut });
    expect(majority).toContain(newLeader);
    // The client of the silent node gave it up and went to the majority.
    expect(majority.map((n) => n.url.replace('nats://', ''))).toContain(await left);

    cut.resume();
    for (let i = 0; i < 10; i++) await writers[1]!.write(trajectory({ id: `after-${i}` }));
    await until(
      'the healed node holds every message the leader holds',
      async () => {
        const [mine, theirs] = await Promise.all([cluster.streamState(cut, stream), cluster.streamState(newLeader, stream)]);
        return mine !== null && theirs !== null && theirs.messages === 20 + 80 + 10 && mine.lastSeq === theirs.lastSeq && mine.messages === theirs.messages;
      },
      30_000,
    );

    // Read from the healed node: each trajectory exactly once.
    const reader = await fx.client(cut);
    const sampler = await ExperienceSampler.open({ nc: reader, buffer, batchSize: 110, prefetch: false });
    const batch = await sampler.sample({ timeoutMs: 20_000 });
    const ids = batch.items.map((t) => t.id);
    expect(new Set(ids).size).toBe(110);
    expect(ids.filter((id) => id.startsWith('during-'))).toHaveLength(80);
    batch.release();
    await sampler.close();
  });
});
