/**
 * A real redis-server on a free 127.0.0.1 port in a temp dir. With `appendonly` on (the
 * default here, as the prompt pool needs it) every write goes to the AOF, so the data survive a
 * restart, and with `appendfsync: 'always'` even a SIGKILL. Ready when INFO answers with our
 * process id (a server still loading its AOF answers -LOADING). The same server is a replica
 * (`replicaOf`), a Cluster node (`cluster`) or, with `sentinel`, a Redis Sentinel (redis-sentinel
 * is redis-server in sentinel mode): redis-sentinel.ts and redis-cluster.ts build groups of them.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findBinary } from './binary.js';
import { ManagedProcess, makeTempDir, removeTempDir } from './managed-process.js';
import { embeddedServer, type EmbeddedServer } from './embedded-server.js';
import { freePort, probe, startOnFreePorts } from './ports.js';

export interface RedisServerOptions {
  appendonly?: boolean;
  /** 'everysec' (redis default: at most 1 s lost on a machine crash) or 'always'. */
  appendfsync?: 'always' | 'everysec' | 'no';
  port?: number;
  dataDir?: string;
  startTimeoutMs?: number;
  /** Start as a replica of the master on 127.0.0.1 at this port. */
  replicaOf?: number;
  /** A Cluster node: `cluster-enabled yes`, its node file in its dir, the cluster bus on a free port of its own. */
  cluster?: { nodeTimeoutMs: number };
  /**
   * A Sentinel: these lines (`sentinel monitor ...`) go into a config file in the server's dir
   * (a sentinel rewrites its config as it learns the group), started with `--sentinel`.
   */
  sentinel?: string[];
}

export type RedisServer = EmbeddedServer;

export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  const binary = findBinary('redis-server', 'LAMINAR_REDIS_SERVER');
  const rootDir = makeTempDir('redis');
  const dataDir = options.dataDir ?? rootDir;
  const { proc, port } = await startOnFreePorts(options.port !== undefined, async () => {
    const port = options.port ?? (await freePort());
    const args = [
      ...(options.sentinel ? [sentinelConfig(rootDir, options.sentinel), '--sentinel'] : []),
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dataDir,
      '--appendonly',
      options.appendonly === false ? 'no' : 'yes',
      '--appendfsync',
      options.appendfsync ?? 'everysec',
      // No RDB snapshots: the AOF is the persistence we test and document.
      '--save',
      '',
      '--daemonize',
      'no',
      '--logfile',
      '',
      ...(options.replicaOf !== undefined ? ['--replicaof', '127.0.0.1', String(options.replicaOf)] : []),
      ...(options.cluster
        ? [
            ...['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf'],
            // Not port + 10000 (the default): that one may be taken, or above 65535.
            ...['--cluster-port', String(await freePort()), '--cluster-node-timeout', String(options.cluster.nodeTimeoutMs)],
          ]
        : []),
    ];
    const proc = new ManagedProcess({
      name: 'redis-server',
      binary,
      args,
      // INFO answers only once the AOF is loaded (-LOADING before), and names the process: another
      // redis-server that took the port first is not mistaken for ours.
      isReady: async (pid) => (await probe(port, 'INFO server\r\n', 1000, `process_id:${pid}\r\n`)).includes(`process_id:${pid}\r\n`),
      startTimeoutMs: options.startTimeoutMs,
    });
    await proc.start();
    return { proc, port };
  }).catch((err: unknown) => {
    removeTempDir(rootDir);
    throw err;
  });
  return embeddedServer(proc, { url: `redis://127.0.0.1:${port}`, port, dataDir, ownsDir: true, rootDir });
}

/** Writes a sentinel's config file (it must be writable: the sentinel records what it learns there). */
function sentinelConfig(dir: string, lines: string[]): string {
  const file = join(dir, 'sentinel.conf');
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}
