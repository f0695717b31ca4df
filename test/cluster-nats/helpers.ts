/** Shared fixtures of the cluster tests: a real 3-node JetStream cluster and clients that follow it. */
import { afterAll, beforeAll } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { startNatsCluster, type NatsCluster, type NatsClusterNode } from '../../src/testing/index.js';

/**
 * A client given every node's URL, trying `first` first (so that a test knows where it sits).
 * It pings every second and gives a node up after two unanswered pings, and a (re)connection
 * that gets no INFO within 2 s: a paused node (no answer at all, not even a closed socket) is
 * left within ~3 s and not chosen again for 20 s (the client's default connect timeout).
 */
export async function clusterClient(cluster: NatsCluster, first?: NatsClusterNode): Promise<NatsConnection> {
  const urls = first ? [first.url, ...cluster.urls.filter((u) => u !== first.url)] : [...cluster.urls];
  return connect({
    servers: urls,
    noRandomize: first !== undefined,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 100,
    pingInterval: 1000,
    maxPingOut: 2,
    timeout: 2000,
  });
}

/** Resolves with the server a connection reconnected to, the first time it does. */
export function reconnected(nc: NatsConnection): Promise<string> {
  return (async () => {
    for await (const s of nc.status()) if (s.type === 'reconnect') return s.server;
    throw new Error('the connection closed without reconnecting');
  })();
}

/** A test file's cluster: see clusterFixture(). */
export interface ClusterFixture {
  cluster: NatsCluster;
  /** A clusterClient(), closed after the file's tests. */
  client(first?: NatsClusterNode): Promise<NatsConnection>;
}

/** A test file's cluster (three nodes, R3 possible), started before its tests and stopped after, with its clients. */
export function clusterFixture(): ClusterFixture {
  const clients: NatsConnection[] = [];
  const fx: ClusterFixture = {
    cluster: undefined as unknown as NatsCluster,
    client: async (first) => {
      const nc = await clusterClient(fx.cluster, first);
      clients.push(nc);
      return nc;
    },
  };
  beforeAll(async () => {
    fx.cluster = await startNatsCluster();
  });
  afterAll(async () => {
    for (const nc of clients) await nc.close();
    await (fx.cluster as NatsCluster | undefined)?.stop();
  });
  return fx;
}

/** Polls `check` every 50 ms until it holds; fails after `timeoutMs` saying what it waited for. */
export async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
