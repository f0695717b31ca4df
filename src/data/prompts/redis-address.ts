/**
 * Where the prompt pool's Redis is, as one string that every `--redis` flag and `LAMINAR_REDIS`
 * accept, and the ioredis client for it:
 *
 *   redis://[:password@]host:port[/db]                        one server (rediss:// for TLS)
 *   redis+sentinel://[:password@]h1:p1,h2:p2,h3:p3/master[/db] Sentinel: the sentinels and the
 *                                                              master's name; the client asks them
 *                                                              where the master is and follows a
 *                                                              failover
 *   redis+cluster://[:password@]h1:p1,h2:p2[,...]              Redis Cluster: any nodes (seeds)
 *
 * Query parameters, on any form: `replicas=<k>` makes the prompt pool wait, after each of its
 * writes, until k replicas acknowledged it (WAIT; see replicated-write.ts), `replicaTimeoutMs`
 * bounds that wait (default 1000); `sentinelPassword` is for sentinels with a password of their
 * own (the password in the user part is the data nodes'). The replication settings travel with the
 * client (replicationOf), so that every daemon that takes `--redis` honours them without a flag
 * of its own. Parsed once into a plain object (parseRedisAddress), so that a bad address fails at
 * start with ERR_BAD_REDIS_URL, before any connection is tried.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { InvalidInputError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface HostPort {
  host: string;
  port: number;
}

/** How many replicas must acknowledge each write of the pool, and how long to wait for them. */
export interface Replication {
  replicas: number;
  timeoutMs: number;
}

export type RedisAddress = (
  | { kind: 'server'; url: string }
  | { kind: 'sentinel'; sentinels: HostPort[]; masterName: string; db: number; password?: string; sentinelPassword?: string }
  | { kind: 'cluster'; nodes: HostPort[]; password?: string }
) & { replication: Replication };

/** A client of the pool's Redis: one server or a Sentinel-managed master (Redis), or a cluster. */
export type PoolRedis = Redis | Cluster;

const DEFAULT_PORT = { server: 6379, sentinel: 26379 } as const;
export const DEFAULT_REPLICA_TIMEOUT_MS = 1000;
/** The query parameters read here; ioredis never sees them. */
const OUR_PARAMS = ['replicas', 'replicaTimeoutMs', 'sentinelPassword'];
const replicationByClient = new WeakMap<PoolRedis, Replication>();

/** The replication an address asked of a client made by createPoolRedis (none: 0 replicas). */
export function replicationOf(redis: PoolRedis): Replication | undefined {
  return replicationByClient.get(redis);
}

function bad(address: string, why: string): InvalidInputError {
  return new InvalidInputError(ErrorCodes.BAD_REDIS_URL, `bad Redis address ${JSON.stringify(maskPassword(address))}: ${why}`);
}

/** The address as it may be printed or logged: a password in it is masked. */
export function maskPassword(address: string): string {
  return address.replace(/^([a-z+]+:\/\/)([^@/]*:)[^@/]*@/i, '$1$2***@');
}

function hostList(address: string, list: string, defaultPort: number): HostPort[] {
  const hosts = list.split(',').map((item): HostPort => {
    // [v6]:port, host:port or host.
    const m = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(\d+))?$/.exec(item);
    if (!m) throw bad(address, `${JSON.stringify(item)} is not host[:port]`);
    const port = m[3] === undefined ? defaultPort : Number(m[3]);
    if (!(port > 0 && port < 65536)) throw bad(address, `port ${m[3]} is outside 1-65535`);
    return { host: m[1] ?? m[2]!, port };
  });
  return hosts;
}

/** Parses an address (see the file comment); throws ERR_BAD_REDIS_URL. */
export function parseRedisAddress(address: string): RedisAddress {
  const m = /^([a-z+]+):\/\/(?:([^@/]*)@)?([^/?]*)(\/[^?]*)?(?:\?(.*))?$/i.exec(address.trim());
  if (!m) throw bad(address, 'expected redis://, rediss://, redis+sentinel:// or redis+cluster://');
  const [, scheme, userInfo, hosts, path = '', query = ''] = m as unknown as [
    string,
    string,
    string | undefined,
    string,
    string | undefined,
    string | undefined,
  ];
  const password = userInfo?.includes(':') ? decodeURIComponent(userInfo.slice(userInfo.indexOf(':') + 1)) : undefined;
  const params = new URLSearchParams(query);
  const integer = (name: string, fallback: number, min: number): number => {
    const text = params.get(name);
    if (text === null) return fallback;
    const v = Number(text);
    if (!Number.isSafeInteger(v) || v < min) throw bad(address, `${name}=${text} is not an integer >= ${min}`);
    return v;
  };
  const replication = { replicas: integer('replicas', 0, 0), timeoutMs: integer('replicaTimeoutMs', DEFAULT_REPLICA_TIMEOUT_MS, 1) };
  const withPassword = <T extends object>(o: T): T & { password?: string; replication: Replication } => ({
    ...o,
    ...(password ? { password } : {}),
    replication,
  });
  switch (scheme.toLowerCase()) {
    case 'redis':
    case 'rediss': {
      hostList(address, hosts, DEFAULT_PORT.server); // checked here, read by ioredis
      for (const p of OUR_PARAMS) params.delete(p);
      const rest = params.toString();
      return { kind: 'server', url: address.trim().replace(/\?.*$/, rest ? `?${rest}` : ''), replication };
    }
    case 'redis+sentinel': {
      const sentinels = hostList(address, hosts, DEFAULT_PORT.sentinel);
      const parts = path.split('/').filter((p) => p !== '');
      if (parts.length < 1 || parts.length > 2) throw bad(address, 'expected /<master name>[/<db>] after the sentinels');
      const db = parts[1] === undefined ? 0 : Number(parts[1]);
      if (!Number.isInteger(db) || db < 0) throw bad(address, `database ${parts[1]} is not an integer >= 0`);
      const sentinelPassword = params.get('sentinelPassword') ?? undefined;
      return withPassword({ kind: 'sentinel', sentinels, masterName: decodeURIComponent(parts[0]!), db, ...(sentinelPassword ? { sentinelPassword } : {}) });
    }
    case 'redis+cluster':
      if (path !== '' && path !== '/') throw bad(address, 'a cluster has no database or master name (one keyspace, db 0)');
      return withPassword({ kind: 'cluster', nodes: hostList(address, hosts, DEFAULT_PORT.server) });
    default:
      throw bad(address, `unknown scheme ${scheme}://`);
  }
}

/**
 * The ioredis client for an address. `options` are the connection's own (retries, timeouts,
 * lazyConnect); for a cluster they apply to every node's connection.
 */
export function createPoolRedis(address: string | RedisAddress, options: RedisOptions = {}): PoolRedis {
  const a = typeof address === 'string' ? parseRedisAddress(address) : address;
  const client = clientFor(a, options);
  replicationByClient.set(client, a.replication);
  return client;
}

function clientFor(a: RedisAddress, options: RedisOptions): PoolRedis {
  switch (a.kind) {
    case 'server':
      return new Redis(a.url, options);
    case 'sentinel':
      return new Redis({
        ...options,
        sentinels: a.sentinels,
        name: a.masterName,
        db: a.db,
        ...(a.password ? { password: a.password } : {}),
        ...(a.sentinelPassword ? { sentinelPassword: a.sentinelPassword } : {}),
        // No `failoverDetector`: in ioredis 6.0 its disconnect on +switch-master can land while the
        // client is asking the sentinels, which ends the client for good ("Connection is closed").
        // A dead master closes the connection anyway, and a demoted one answers READONLY:
        // then the client reconnects, asks the sentinels again and resends to the new master.
        reconnectOnError: (err) => err.message.startsWith('READONLY'),
      });
    case 'cluster': {
      const clusterOptions: ClusterOptions = {
        redisOptions: { ...options, ...(a.password ? { password: a.password } : {}) },
        ...(options.lazyConnect !== undefined ? { lazyConnect: options.lazyConnect } : {}),
        ...(options.maxRetriesPerRequest !== undefined ? { maxRetriesPerRequest: options.maxRetriesPerRequest } : {}),
        ...(options.retryStrategy ? { clusterRetryStrategy: options.retryStrategy } : {}),
      };
      return new Cluster(a.nodes, clusterOptions);
    }
  }
}
