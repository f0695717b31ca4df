/**
 * What both demo jobs stand on: a directory on /dev/shm with the job secret, an embedded
 * nats-server (JetStream) and redis-server, the ledger watching the data plane, and the processes
 * the job starts, stopped together at the end (their logs written to `logs` when given).
 */
import { randomBytes } from 'node:crypto';
import { appendFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../services/index.js';
import type { Daemon } from '../services/daemon-process.js';
import { watchLedger } from './books.js';
import { removeShmTree } from '../relay/pages/huge-mount.js';

export interface Stage {
  root: string;
  secretFile: string;
  nats: NatsServer;
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
}

export async function openStage(prefix: string, logs: string | undefined, options: StageOptions = {}): Promise<Stage> {
  const root = mkdtempSync(join('/dev/shm', prefix));
  const secretFile = join(root, 'secret');
  writeFileSync(secretFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
  console.log('starting nats-server (JetStream) and redis-server ...');
  const [nats, redisServer] = await Promise.all([
    startNatsServer({ jetstream: true, ...(options.natsHost ? { host: options.natsHost } : {}) }),
    startRedisServer({ appendonly: true }),
  ]);
  // The soak restarts nats-server: the stage's own connection waits for it, however long.
  const nc = await connect({ servers: nats.url, name: 'demo', maxReconnectAttempts: -1 });
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
      await Promise.all([nats.stop(), redisServer.stop()]);
      removeShmTree(root);
    },
  };
}

/** Ctrl-C ends the run early: `signal` aborts, and `interrupted` says so at the end (exit code 130). */
export function onInterrupt(): { signal: AbortSignal; readonly interrupted: boolean } {
  const stop = new AbortController();
  process.once('SIGINT', () => {
    process.stdout.write('\ninterrupted: stopping every process\n');
    stop.abort();
  });
  return {
    signal: stop.signal,
    get interrupted() {
      return stop.signal.aborted;
    },
  };
}
