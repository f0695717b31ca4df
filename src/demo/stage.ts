/**
 * What both demo jobs stand on: a directory on /dev/shm with the job secret, an embedded
 * nats-server (JetStream) or a 3-node JetStream cluster (`natsNodes: 3`), a redis-server, the
 * ledger watching the data plane, and the processes the job starts, stopped together at the end
 * (their logs written to `logs` when given).
 */
import { randomBytes } from 'node:crypto';
import { appendFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { openJetStreamManager } from '../data/jetstream-manager.js';
import { startNatsCluster, startNatsServer, startRedisServer, type NatsCluster, type NatsServer, type RedisServer } from '../services/index.js';
import { ensureBufferStream } from '../data/experience/stream.js';
import { ensurePartialStream } from '../data/partial/partial-stream.js';
import { openControlBucket } from '../control/bucket.js';
import { controlNames } from '../control/subjects.js';
import { DEFAULT_JOB } from '../control/nats-options.js';
import type { Daemon } from '../services/daemon-process.js';
import { watchLedger } from './books.js';
import { removeShmTree } from '../relay/pages/huge-mount.js';

export interface Stage {
  root: string;
  secretFile: string;
  /** The nats-server: the only one, or the cluster's first node. */
  nats: NatsServer;
  /** The cluster when the job runs on one (`natsNodes: 3`), else null. */
  natsCluster: NatsCluster | null;
  /** What `--nats` takes: every node's URL, comma-separated. */
  natsUrl: string;
  /** The client port of every node (the testbed's hosts reach them at its gateway). */
  natsPorts: number[];
  redisServer: RedisServer;
  nc: NatsConnection;
  redis: Redis;
  ledger: ReturnType<typeof watchLedger>;
  /**
   * Registers a process the job started: stopped (SIGTERM) by shutdown(). `last`: stopped once the
   * others have exited (the manager, whose dashboard stays live while the job winds down).
   */
  keep<D extends Daemon>(daemon: D, options?: { last?: boolean }): D;
  /** Stops every process kept, writes their logs, stops the servers and removes the directory. */
  shutdown(): Promise<void>;
}

export interface StageOptions {
  /** Address nats-server listens on (default 127.0.0.1; 0.0.0.0 for daemons in testbed namespaces). */
  natsHost?: string;
  /**
   * 1 (default): one nats-server. 3: a JetStream cluster of three (startNatsCluster), on which the
   * stage creates the buffer, the partial pool and the control bucket at R3 before any daemon
   * starts (whoever creates a stream first decides its replicas).
   */
  natsNodes?: number;
}

export async function openStage(prefix: string, logs: string | undefined, options: StageOptions = {}): Promise<Stage> {
  const root = mkdtempSync(join('/dev/shm', prefix));
  const secretFile = join(root, 'secret');
  writeFileSync(secretFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
  const nodes = options.natsNodes ?? 1;
  if (nodes !== 1 && nodes !== 3) throw new RangeError(`a job runs on 1 nats-server or a cluster of 3, got ${nodes}`);
  const host = options.natsHost ? { host: options.natsHost } : {};
  console.log(`starting ${nodes === 1 ? 'nats-server' : 'a 3-node nats-server cluster'} (JetStream) and redis-server ... (the job's directory: ${root})`);
  const [natsCluster, single, redisServer] = await Promise.all([
    // A node reports healthy only once a quorum of its peers is back and its streams are restored:
    // after a whole-cluster restart under the soak's load that took 15-19 s, past the default 20 s
    // now and then, and a node not ready in time is killed.
    nodes === 3 ? startNatsCluster({ ...host, startTimeoutMs: 120_000 }) : null,
    nodes === 1 ? startNatsServer({ jetstream: true, ...host }) : null,
    startRedisServer({ appendonly: true }),
  ]);
  const nats = (natsCluster?.nodes[0] ?? single)!;
  const natsUrl = natsCluster?.servers ?? nats.url;
  // The soak restarts nats-server: the stage's own connection waits for it, however long.
  const nc = await connect({ servers: natsUrl.split(','), name: 'demo', maxReconnectAttempts: -1 });
  if (natsCluster) await createReplicated(nc, 3);
  const redis = new Redis(redisServer.port, '127.0.0.1', { maxRetriesPerRequest: null });
  // It reconnects by itself (the soak restarts redis-server); without a listener ioredis prints each failed attempt.
  redis.on('error', () => undefined);
  const ledger = watchLedger(nc);
  const daemons = new Set<Daemon>();
  const lastOnes = new Set<Daemon>();
  if (logs) mkdirSync(logs, { recursive: true });
  const writeLog = (d: Daemon): void => {
    if (logs) appendFileSync(join(logs, `${d.name.replace(/\s+/g, '-')}.log`), `${d.logs.join('\n')}\n`);
  };
  return {
    root,
    secretFile,
    nats,
    natsCluster,
    natsUrl,
    natsPorts: natsCluster ? natsCluster.nodes.map((n) => n.port) : [nats.port],
    redisServer,
    nc,
    redis,
    ledger,
    keep(daemon, options = {}) {
      daemons.add(daemon);
      if (options.last === true) lastOnes.add(daemon);
      // A process restarted many times (the soak) leaves its log behind, appended: each run of it is kept, in order.
      void daemon.exited.then(() => {
        daemons.delete(daemon);
        lastOnes.delete(daemon);
        writeLog(daemon);
      });
      return daemon;
    },
    async shutdown() {
      await Promise.all([...daemons].filter((d) => !lastOnes.has(d)).map((d) => d.kill('SIGTERM')));
      await Promise.all([...lastOnes].map((d) => d.kill('SIGTERM')));
      if (logs) console.log(`logs of every process in ${logs}`);
      ledger.stop();
      redis.disconnect();
      await nc.close().catch(() => undefined);
      await Promise.all([natsCluster ? natsCluster.stop() : nats.stop(), redisServer.stop()]);
      removeShmTree(root);
    },
  };
}

/** The job's buffer, partial pool and control bucket (default names, default job), at `replicas`. */
async function createReplicated(nc: NatsConnection, replicas: number): Promise<void> {
  const jsm = await openJetStreamManager(nc);
  await ensureBufferStream(jsm, { replicas });
  await ensurePartialStream(jsm, { replicas });
  await openControlBucket(nc, controlNames(DEFAULT_JOB).bucket, { replicas });
}
