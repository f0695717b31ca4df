/**
 * "Was this trajectory written?" asked of a node whose replica of the buffer has fallen behind
 * (issue #47: 620 trajectories written twice in a 40-minute soak on a 3-node cluster).
 *
 * The buffer's streams have `allow_direct`, so a direct get is answered by any replica that has
 * once caught up, the client's own server first; a replica that fell behind again keeps answering,
 * from what it holds. Here one node is stopped (SIGSTOP), its route connections are cut, a record
 * and a completion mark are written on the two others, and then those two are stopped and the
 * node resumed alone: it cannot catch up, and it is the only server its client can ask. A direct
 * get there says "no such message" for both. ExperienceWriter.has must not say "not written":
 * it asks the stream's leader, and so waits until the majority is back.
 *
 * Why the routes are cut by hand (`ss -K`): a stopped process keeps its sockets, and the route
 * traffic sent to it meanwhile (the write, the commit) waits in its socket buffers, applied the
 * moment it resumes, racing the question. A socket destroyed while the node is stopped carries
 * nothing sent after it, so the node resumes without the write whatever the timing. (This machine
 * has no iptables or nft, and a rule on loopback ports could not tell the node's routes from the
 * others' anyway: see partition.test.ts.) Needs root, as the testbed tests do.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ExperienceWriter } from '../../src/data/index.js';
import { bufferNames } from '../../src/data/experience/stream.js';
import { CompletionMarks } from '../../src/data/experience/completion-marks.js';
import { monitorGet } from '../../src/services/nats.js';
import type { NatsCluster, NatsClusterNode } from '../../src/testing/index.js';
import { trajectory } from '../data/helpers.js';
import { clusterFixture, until } from './helpers.js';

const fx = clusterFixture();

/** The node's established route connections (its local port and the peer's), from `ss`. */
function routeSockets(cluster: NatsCluster, node: NatsClusterNode): Array<{ local: number; peer: number }> {
  const out = spawnSync('ss', ['-Htnp', 'state', 'established'], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`ss failed: ${out.stderr}`);
  const peers = new Set(cluster.nodes.filter((n) => n !== node).map((n) => n.clusterPort));
  const found: Array<{ local: number; peer: number }> = [];
  for (const line of out.stdout.split('\n')) {
    const m = /\S+:(\d+)\s+\S+:(\d+)\s+users:.*pid=(\d+),/.exec(line);
    if (!m || Number(m[3]) !== node.pid) continue;
    const local = Number(m[1]);
    const peer = Number(m[2]);
    // Accepted on its cluster port, or opened by it to another node's.
    if (local === node.clusterPort || peers.has(peer)) found.push({ local, peer });
  }
  return found;
}

/** Destroys every route connection of a (stopped) node; resolves once no other node lists a route to it. */
async function cutRoutes(cluster: NatsCluster, node: NatsClusterNode): Promise<void> {
  const sockets = routeSockets(cluster, node);
  expect(sockets.length).toBeGreaterThan(0);
  for (const { local, peer } of sockets) {
    const res = spawnSync('ss', ['-K', 'state', 'established', 'sport', '=', `:${local}`, 'dport', '=', `:${peer}`], { encoding: 'utf8' });
    // Destroying sockets takes root (CAP_NET_ADMIN) and a kernel with INET_DIAG_DESTROY.
    if (res.status !== 0) throw new Error(`ss -K could not destroy ${node.name}'s route socket ${local} -> ${peer}: ${res.stderr}`);
  }
  for (const other of cluster.nodes.filter((n) => n !== node)) {
    await until(`${other.name} has no route to ${node.name}`, async () => {
      const res = await monitorGet(other.monitorPort, '/routez');
      if (res?.status !== 200) return false;
      const routes = (JSON.parse(res.body) as { routes?: Array<{ remote_name?: string }> }).routes ?? [];
      return !routes.some((r) => r.remote_name === node.name);
    });
  }
}

/** Resolves at the first JetStream API message get (the leader's read) a connection's server sees. */
async function leaderReadSeen(nc: NatsConnection, stream: string): Promise<void> {
  const sub = nc.subscribe(`$JS.API.STREAM.MSG.GET.${stream}`, { max: 1 });
  await nc.flush();
  for await (const _ of sub) return;
}

describe('has() on a node whose replica fell behind (R3)', () => {
  it('says written for a record and a completion mark the node missed, asking the leader', async () => {
    const { cluster } = fx;
    const buffer = 'stale';
    const names = bufferNames(buffer);
    const setup = await fx.client();
    const first = await ExperienceWriter.open({ nc: setup, buffer, replicas: 3 });
    // The node that falls behind leads neither stream: the two others keep both going.
    const leaders = [await cluster.streamLeader(names.stream), await cluster.streamLeader(names.doneStream)];
    const behind = cluster.nodes.find((n) => !leaders.includes(n))!;
    const majority = cluster.nodes.filter((n) => n !== behind);

    const onMajority = await fx.client(majority[0]);
    const writer = await ExperienceWriter.open({ nc: onMajority, buffer });
    const marks = new CompletionMarks(jetstream(onMajority), await jetstreamManager(onMajority), names);
    // The asking rollout's connection knows only the node (and, with the default 2-minute pings,
    // stays there through the pause): its direct gets are answered there.
    const onBehind = await connect({ servers: behind.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    const asker = await ExperienceWriter.open({ nc: onBehind, buffer });

    await first.write(trajectory({ id: 'before' }));
    await marks.mark(['before-mark']);
    await until('the node holds every message of both streams', async () => {
      for (const stream of [names.stream, names.doneStream]) {
        const [mine, leader] = await Promise.all([cluster.streamState(behind, stream), cluster.streamState(await cluster.streamLeader(stream), stream)]);
        if (!mine || !leader || mine.lastSeq !== leader.lastSeq || leader.lastSeq === 0) return false;
      }
      return true;
    });
    expect(await asker.has('before')).toBe(true);

    // The node falls behind: stopped, its routes cut; a record and a mark are written without it.
    behind.pause();
    await cutRoutes(cluster, behind);
    await writer.write(trajectory({ id: 'written' }));
    await marks.mark(['trained-on']);
    // Nobody can bring it up to date: the majority stops, and the node comes back alone.
    for (const n of majority) n.pause();
    behind.resume();

    try {
      const asked = leaderReadSeen(onBehind, names.stream);
      const answers = Promise.all([asker.has('written'), asker.has('trained-on')]);
      // A direct get is answered at once by the node, from what it holds; a read from the leader
      // waits for one. Either way, the majority comes back only after the question was asked.
      await Promise.race([answers, asked]);
      for (const n of majority) n.resume();
      expect(await answers).toEqual([true, true]);
    } finally {
      for (const n of majority) n.resume();
      await onBehind.close();
    }
  }, 90_000);
});
