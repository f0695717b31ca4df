/**
 * A Redis group under Sentinel on 127.0.0.1, as production runs the prompt pool's Redis: a master,
 * replicas, and sentinels that watch it and promote a replica when it dies. Every process is a
 * startRedisServer() (its own free port and temp dir); the sentinels are redis-server in sentinel
 * mode, with fast failure detection (`downAfterMs`) so that tests see a failover in seconds.
 *
 *   const group = await startRedisSentinelGroup();
 *   const redis = createPoolRedis(group.url);          // redis+sentinel://127.0.0.1:p1,p2,p3/laminar
 *   await group.killMaster();                          // SIGKILL, as in a crash
 *   const port = await group.waitForNewMaster(killed); // the port of the promoted replica
 */
import { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRedisServer, type RedisServer } from './redis.js';
import { ServiceError } from './errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface RedisSentinelOptions {
  /** Name of the master the sentinels monitor (the address names it). Default 'laminar'. */
  masterName?: string;
  /** Replicas of the master. Default 1. */
  replicas?: number;
  /** Sentinels. Default 3. */
  sentinels?: number;
  /** Sentinels that must agree the master is down. Default a majority of them. */
  quorum?: number;
  /** `down-after-milliseconds`: silence before a sentinel deems the master down. Default 500. */
  downAfterMs?: number;
  /** `failover-timeout`. Default 5000 (Redis: 3 min). */
  failoverTimeoutMs?: number;
  /** appendfsync of the data servers (AOF on). Default 'everysec'. */
  appendfsync?: 'always' | 'everysec' | 'no';
  /** Bound of each wait (start, a group that sees itself). Default 20 s. */
  timeoutMs?: number;
}

export interface RedisSentinelGroup {
  readonly masterName: string;
  /** `redis+sentinel://127.0.0.1:<s1>,<s2>,.../<masterName>` (see createPoolRedis). */
  readonly url: string;
  /** The data servers: [0] started as the master, the others as its replicas. */
  readonly servers: readonly RedisServer[];
  readonly sentinels: readonly RedisServer[];
  /** Port of the master, as the sentinels see it now. */
  masterPort(): Promise<number>;
  /** The data server on that port. */
  master(): Promise<RedisServer>;
  /** SIGKILLs the current master; its port. */
  killMaster(): Promise<number>;
  /** Waits until the sentinels name a master other than `oldPort` and it answers as a master; its port. */
  waitForNewMaster(oldPort: number, timeoutMs?: number): Promise<number>;
  /**
   * Restarts every killed server (its AOF kept) and waits until the master has all its replicas
   * online again: the sentinels turn a returning old master into a replica of the new one.
   */
  restoreReplicas(timeoutMs?: number): Promise<void>;
  /** Stops every process and removes their directories. */
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Asks one Redis process a command on a short-lived connection, or undefined when it cannot answer. */
async function ask(port: number, ...command: [string, ...Array<string | number>]): Promise<unknown> {
  const client = new Redis(port, '127.0.0.1', { lazyConnect: true, connectTimeout: 1000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return await client.call(...command);
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
}

/** Polls `check` every 50 ms until it yields a value; ERR_SERVICE_START_FAILED (naming `what`) after timeoutMs. */
async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new ServiceError(ErrorCodes.SERVICE_START_FAILED, `redis sentinel group: ${what} within ${timeoutMs} ms`);
    await sleep(50);
  }
}

export async function startRedisSentinelGroup(options: RedisSentinelOptions = {}): Promise<RedisSentinelGroup> {
  const name = options.masterName ?? 'laminar';
  const replicas = options.replicas ?? 1;
  const sentinelCount = options.sentinels ?? 3;
  const quorum = options.quorum ?? Math.floor(sentinelCount / 2) + 1;
  const timeoutMs = options.timeoutMs ?? 20_000;
  const appendfsync = options.appendfsync ?? 'everysec';
  const started: RedisServer[] = [];
  const stopAll = async (): Promise<void> => {
    await Promise.all(started.map((s) => s.stop()));
  };
  try {
    const master = await startRedisServer({ appendfsync });
    started.push(master);
    const servers = [master];
    for (const s of await Promise.all(Array.from({ length: replicas }, () => startRedisServer({ appendfsync, replicaOf: master.port })))) {
      started.push(s);
      servers.push(s);
    }
    // Replicas in sync before the sentinels look: a replica still loading is not promotable.
    const replicasOnline = (port: number, waitMs: number): Promise<true> =>
      until(`${replicas} replicas in sync`, waitMs, async () => {
        const info = ((await ask(port, 'INFO', 'replication')) as string | undefined) ?? '';
        return (info.match(/^slave\d+:.*state=online/gm)?.length ?? 0) >= replicas ? true : undefined;
      });
    await replicasOnline(master.port, timeoutMs);
    const sentinels = await Promise.all(
      Array.from({ length: sentinelCount }, () =>
        startRedisServer({
          appendonly: false,
          sentinel: [
            `sentinel monitor ${name} 127.0.0.1 ${master.port} ${quorum}`,
            `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 500}`,
            `sentinel failover-timeout ${name} ${options.failoverTimeoutMs ?? 5000}`,
            `sentinel parallel-syncs ${name} 1`,
          ],
        }),
      ),
    );
    started.push(...sentinels);
    // Each sentinel knows the replicas and the other sentinels (they find each other through the
    // master's hello channel): only then can they agree on a failover.
    await until('sentinels that know every replica and each other', timeoutMs, async () => {
      for (const s of sentinels) {
        const others = (await ask(s.port, 'SENTINEL', 'SENTINELS', name)) as unknown[] | undefined;
        const known = (await ask(s.port, 'SENTINEL', 'REPLICAS', name)) as unknown[] | undefined;
        if (others?.length !== sentinelCount - 1 || known?.length !== replicas) return undefined;
      }
      return true;
    });
    const masterPort = async (): Promise<number> =>
      until('a sentinel that names the master', timeoutMs, async () => {
        for (const s of sentinels) {
          const addr = (await ask(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as [string, string] | undefined | null;
          if (addr) return Number(addr[1]);
        }
        return undefined;
      });
    const byPort = (port: number): RedisServer => {
      const s = servers.find((x) => x.port === port);
      if (!s) throw new ServiceError(ErrorCodes.SERVICE_START_FAILED, `redis sentinel group: the sentinels name port ${port}, not a server of the group`);
      return s;
    };
    const stop = stopAll;
    return {
      masterName: name,
      url: `redis+sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${name}`,
      servers,
      sentinels,
      masterPort,
      master: async () => byPort(await masterPort()),
      async killMaster() {
        const port = await masterPort();
        await byPort(port).kill();
        return port;
      },
      waitForNewMaster: (oldPort, waitMs = timeoutMs) =>
        until(`a master other than port ${oldPort}`, waitMs, async () => {
          // Every sentinel agrees (they all switched), and the new master says it is one.
          const named = await Promise.all(
            sentinels.map(async (s) => (await ask(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as [string, string] | null),
          );
          const port = Number(named[0]?.[1]);
          if (port === oldPort || !named.every((a) => Number(a?.[1]) === port)) return undefined;
          const role = (await ask(port, 'ROLE')) as [string] | undefined;
          return role?.[0] === 'master' ? port : undefined;
        }),
      async restoreReplicas(waitMs = timeoutMs) {
        await Promise.all(servers.filter((s) => s.pid === undefined).map((s) => s.restart()));
        await replicasOnline(await masterPort(), waitMs);
      },
      stop,
      [Symbol.asyncDispose]: stop,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
