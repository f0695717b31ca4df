/**
 * Questions whose answer starts work, asked of a node whose replica has fallen behind (issue #47:
 * 620 trajectories written twice in a 40-minute soak on a 3-node cluster): "was this trajectory
 * written?" (ExperienceWriter.has) and "who owns this partial log?" (PartialPool.summary).
 *
 * The data module's streams have `allow_direct`, so a direct get is answered by any replica that
 * has once caught up, the client's own server first; a replica that fell behind again keeps
 * answering, from what it holds. Here one node is stopped (SIGSTOP), its route connections are
 * cut, a record and a completion mark are written (or a partial log changes owner) on the two
 * others, and then those two are stopped and the node resumed alone: it cannot catch up, and it
 * is the only server its client can ask. A direct get there says "no such message" for the
 * record and the mark, and names the log's old owner. The reads ask the stream's leader instead
 * (src/data/leader-read.ts), and so wait until the majority is back.
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
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { ExperienceWriter, PartialPool, partialNames, type PartialStart } from '../../src/data/index.js';
import { bufferNames } from '../../src/data/experience/stream.js';
import { CompletionMarks } from '../../src/data/experience/completion-marks.js';
import { monitorGet } from '../../src/services/nats.js';
import { openControlBucket } from '../../src/control/bucket.js';
import { LeaderLease } from '../../src/manager/leader-lease.js';
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

/** The names of the nodes a node has a route to (empty when it does not answer). */
async function routedTo(node: NatsClusterNode): Promise<Set<string>> {
  const res = await monitorGet(node.monitorPort, '/routez');
  if (res?.status !== 200) return new Set();
  const routes = (JSON.parse(res.body) as { routes?: Array<{ remote_name?: string }> }).routes ?? [];
  return new Set(routes.map((r) => r.remote_name ?? ''));
}

/**
 * Resolves once every node has routes to every other and is healthy (JetStream's meta layer and
 * its streams current: /healthz), as after a test that cut one off, and once the meta leader
 * places an R3 stream again. Routes and /healthz come back before the meta leader counts a
 * resumed node online: a stream created in between is refused ("no suitable peers for placement,
 * peer offline", seen in a clean-clone run right after the first case's pauses).
 */
async function whole(cluster: NatsCluster, nc: NatsConnection): Promise<void> {
  for (const node of cluster.nodes) {
    const others = cluster.nodes.filter((n) => n !== node).map((n) => n.name);
    await until(`${node.name} has routes to ${others.join(', ')} and is healthy`, async () => {
      const routed = await routedTo(node);
      return others.every((name) => routed.has(name)) && (await monitorGet(node.monitorPort, '/healthz'))?.status === 200;
    });
  }
  const jsm = await jetstreamManager(nc);
  await until('an R3 stream is placed on the three nodes', () =>
    jsm.streams.add({ name: 'placement_probe', subjects: ['laminar.test.placement'], num_replicas: 3, storage: StorageType.Memory }).then(
      async () => {
        await jsm.streams.delete('placement_probe');
        return true;
      },
      (err: unknown) => {
        if (/no suitable peers/.test((err as Error).message)) return false;
        throw err;
      },
    ),
  );
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
    await until(`${other.name} has no route to ${node.name}`, async () => !(await routedTo(other)).has(node.name));
  }
}

/** Resolves at the first JetStream API message get (a read from a stream's leader) a connection's server sees. */
async function leaderReadSeen(nc: NatsConnection): Promise<void> {
  const sub = nc.subscribe('$JS.API.STREAM.MSG.GET.>', { max: 1 });
  await nc.flush();
  for await (const _ of sub) return;
}

/** Waits until `node` holds every message the leader of each stream holds (and there is one). */
async function caughtUp(cluster: NatsCluster, node: NatsClusterNode, streams: readonly string[]): Promise<void> {
  await until(`${node.name} holds every message of ${streams.join(', ')}`, async () => {
    for (const stream of streams) {
      const [mine, leader] = await Promise.all([cluster.streamState(node, stream), cluster.streamState(await cluster.streamLeader(stream), stream)]);
      if (!mine || !leader || mine.lastSeq !== leader.lastSeq || leader.lastSeq === 0) return false;
    }
    return true;
  });
}

/**
 * `behind` falls behind for certain: stopped, its routes cut, `whileAway` run on the others; then
 * the others are stopped and `behind` resumes alone. `ask` runs there; the others come back once
 * its answer is in, or once it has asked a leader (which only their return can answer). Returns
 * the answer.
 */
async function askWhileBehind<T>(
  cluster: NatsCluster,
  behind: NatsClusterNode,
  onBehind: NatsConnection,
  whileAway: () => Promise<void>,
  ask: () => Promise<T>,
): Promise<T> {
  const majority = cluster.nodes.filter((n) => n !== behind);
  behind.pause();
  await cutRoutes(cluster, behind);
  await whileAway();
  // Nobody can bring it up to date: the majority stops, and the node comes back alone.
  for (const n of majority) n.pause();
  behind.resume();
  try {
    const asked = leaderReadSeen(onBehind);
    const answer = ask();
    // A direct get is answered at once by the node, from what it holds; a read from the leader
    // waits for one. Either way, the majority comes back only after the question was asked.
    await Promise.race([answer, asked]);
    for (const n of majority) n.resume();
    return await answer;
  } finally {
    for (const n of majority) n.resume();
  }
}

/**
 * A connection that knows only `node` (and, with the default 2-minute pings, stays there through
 * a pause): its direct gets are answered there.
 */
async function connectOnlyTo(node: NatsClusterNode): Promise<NatsConnection> {
  return connect({ servers: node.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
}

describe('reads on a node whose replica fell behind (R3)', () => {
  it('has() says written for a record and a completion mark the node missed, asking the leader', async () => {
    const { cluster } = fx;
    const buffer = 'stale';
    const names = bufferNames(buffer);
    const setup = await fx.client();
    await whole(cluster, setup);
    const first = await ExperienceWriter.open({ nc: setup, buffer, replicas: 3 });
    // The node that falls behind leads neither stream: the two others keep both going.
    const leaders = [await cluster.streamLeader(names.stream), await cluster.streamLeader(names.doneStream)];
    const behind = cluster.nodes.find((n) => !leaders.includes(n))!;
    const onMajority = await fx.client(cluster.nodes.find((n) => n !== behind));
    const writer = await ExperienceWriter.open({ nc: onMajority, buffer });
    const marks = new CompletionMarks(jetstream(onMajority), await jetstreamManager(onMajority), names);
    const onBehind = await connectOnlyTo(behind);
    const asker = await ExperienceWriter.open({ nc: onBehind, buffer });
    try {
      await first.write(trajectory({ id: 'before' }));
      await marks.mark(['before-mark']);
      await caughtUp(cluster, behind, [names.stream, names.doneStream]);
      expect(await asker.has('before')).toBe(true);

      const answers = await askWhileBehind(
        cluster,
        behind,
        onBehind,
        async () => {
          await writer.write(trajectory({ id: 'written' }));
          await marks.mark(['trained-on']);
        },
        () => Promise.all([asker.has('written'), asker.has('trained-on')]),
      );
      // With direct gets: [false, false], and both samples would be generated again.
      expect(answers).toEqual([true, true]);
    } finally {
      await onBehind.close();
    }
  }, 90_000);

  it("a partial log's owner is the one the leader holds, not the one the node last saw", async () => {
    const { cluster } = fx;
    const pool = 'stalepool';
    const stream = partialNames(pool).stream;
    const setup = await fx.client();
    await whole(cluster, setup);
    await PartialPool.open({ nc: setup, pool, replicas: 3 });
    const leader = await cluster.streamLeader(stream);
    const behind = cluster.nodes.find((n) => n !== leader)!;
    const onMajority = await fx.client(leader);
    const majorityPool = await PartialPool.open({ nc: onMajority, pool });
    const onBehind = await connectOnlyTo(behind);
    const behindPool = await PartialPool.open({ nc: onBehind, pool });
    const start: PartialStart = { trajectoryId: 'moved', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, weightVersion: 1 };
    try {
      (await majorityPool.start('ro-a', start)).release();
      await caughtUp(cluster, behind, [stream]);
      expect((await behindPool.summary('moved'))?.owner).toBe('ro-a');

      const summary = await askWhileBehind(
        cluster,
        behind,
        onBehind,
        async () => {
          const taken = await majorityPool.takeOver('moved', 'ro-b', { from: 'ro-a' });
          if (taken.status === 'taken') taken.trajectory.release();
        },
        () => behindPool.summary('moved'),
      );
      // With a direct get: ro-a, and ro-a's reconciliation would keep watching a log it lost.
      expect(summary?.owner).toBe('ro-b');
    } finally {
      await Promise.all([majorityPool.close(), behindPool.close()]);
      await onBehind.close();
    }
  }, 90_000);

  it("the manager's lease is the one the leader holds: a standby on the node does not see the old holder", async () => {
    const { cluster } = fx;
    const bucket = 'stalecontrol';
    const stream = `KV_${bucket}`;
    const setup = await fx.client();
    await whole(cluster, setup);
    await openControlBucket(setup, bucket, { replicas: 3 });
    const leader = await cluster.streamLeader(stream);
    const behind = cluster.nodes.find((n) => n !== leader)!;
    const onMajority = await fx.client(leader);
    const majorityKv = await openControlBucket(onMajority, bucket, { replicas: 3 });
    const onBehind = await connectOnlyTo(behind);
    const behindKv = await openControlBucket(onBehind, bucket, { replicas: 3 });
    const first = new LeaderLease(majorityKv, 'manager-a', 60_000);
    const second = new LeaderLease(majorityKv, 'manager-b', 60_000);
    const standby = new LeaderLease(behindKv, 'manager-c', 60_000);
    try {
      expect(await first.step()).toBe('leader');
      await caughtUp(cluster, behind, [stream]);
      await standby.step();
      expect(standby.holderSeen).toBe('manager-a');

      await askWhileBehind(
        cluster,
        behind,
        onBehind,
        async () => {
          // The lease changes hands while the node is away: a clean hand-over.
          await first.release();
          expect(await second.step()).toBe('leader');
        },
        // As the manager's rounds do: a round whose read times out (no leader yet) is followed by the next.
        async () => {
          for (let round = 1; ; round++) {
            try {
              return await standby.step();
            } catch (err) {
              if (round === 10) throw err;
            }
          }
        },
      );
      // With a direct get: manager-a, the holder the node last saw.
      expect(standby.holderSeen).toBe('manager-b');
      expect(standby.state).toBe('standby');
    } finally {
      await onBehind.close();
    }
  }, 90_000);
});
