/**
 * A Redis Cluster of masters on 127.0.0.1 (no replicas): each a startRedisServer() node with
 * `cluster-enabled`, the 16384 slots split evenly (CLUSTER ADDSLOTSRANGE), joined with CLUSTER
 * MEET, ready when every node says `cluster_state:ok` and knows all the others.
 *
 *   const cluster = await startRedisCluster({ masters: 3 });
 *   const redis = createPoolRedis(cluster.url);        // redis+cluster://127.0.0.1:p1,p2,p3
 */
import { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRedisServer, type RedisServer } from './redis.js';
import { ServiceError } from './errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface RedisClusterOptions {
  /** Master nodes. Default 3 (the fewest Redis Cluster accepts for a real deployment). */
  masters?: number;
  /** `cluster-node-timeout`. Default 2000. */
  nodeTimeoutMs?: number;
  /** Bound of the wait for `cluster_state:ok`. Default 20 s. */
  timeoutMs?: number;
}

export interface RedisCluster {
  /** `redis+cluster://127.0.0.1:<p1>,<p2>,...` (see createPoolRedis). */
  readonly url: string;
  readonly nodes: readonly RedisServer[];
  /** The node that serves a key (by CLUSTER KEYSLOT and the slot ranges given at start). */
  nodeOf(key: string): Promise<RedisServer>;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const SLOTS = 16384;

export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  const masters = options.masters ?? 3;
  const timeoutMs = options.timeoutMs ?? 20_000;
  const nodes = await Promise.all(Array.from({ length: masters }, () => startRedisServer({ cluster: { nodeTimeoutMs: options.nodeTimeoutMs ?? 2000 } })));
  const clients = nodes.map((n) => new Redis(n.port, '127.0.0.1', { maxRetriesPerRequest: 1 }));
  const stop = async (): Promise<void> => {
    for (const c of clients) c.disconnect();
    await Promise.all(nodes.map((n) => n.stop()));
  };
  // Node i serves slots [ranges[i], ranges[i + 1]).
  const ranges = Array.from({ length: masters + 1 }, (_, i) => Math.floor((i * SLOTS) / masters));
  try {
    await Promise.all(clients.map((c, i) => c.call('CLUSTER', 'ADDSLOTSRANGE', ranges[i]!, ranges[i + 1]! - 1)));
    // MEET needs each node's bus port (its own free port, not port + 10000): CLUSTER NODES says
    // it, `<ip>:<port>@<bus port>` on the line of `myself`.
    for (const [i, n] of nodes.entries()) {
      if (i === 0) continue;
      const me = String(await clients[i]!.call('CLUSTER', 'NODES'))
        .split('\n')
        .find((l) => l.includes('myself'));
      const busPort = /@(\d+)/.exec(me ?? '')?.[1];
      if (busPort === undefined)
        throw new ServiceError(ErrorCodes.SERVICE_START_FAILED, `redis cluster: no bus port in CLUSTER NODES of port ${n.port}: ${me}`);
      await clients[0]!.call('CLUSTER', 'MEET', '127.0.0.1', n.port, busPort);
    }
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const infos = await Promise.all(clients.map(async (c) => String(await c.call('CLUSTER', 'INFO'))));
      if (infos.every((i) => i.includes('cluster_state:ok') && i.includes(`cluster_known_nodes:${masters}`))) break;
      if (Date.now() > deadline)
        throw new ServiceError(
          ErrorCodes.SERVICE_START_FAILED,
          `redis cluster: not every node saw cluster_state:ok within ${timeoutMs} ms: ${infos.join(' | ')}`,
        );
      await sleep(50);
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    url: `redis+cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`,
    nodes,
    async nodeOf(key) {
      const slot = Number(await clients[0]!.call('CLUSTER', 'KEYSLOT', key));
      return nodes[ranges.findIndex((start, i) => slot >= start && slot < ranges[i + 1]!)]!;
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
