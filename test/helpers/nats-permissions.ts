/**
 * A real nats-server (JetStream) with two users, for faults that come from the server refusing
 * a client: `admin` may do anything, `restricted` may not publish to the subjects in `deny`
 * (its requests there fail with a permission violation). `deny()` changes the list and reloads
 * the server's configuration (SIGHUP), as an operator fixing a deployment would.
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { ManagedProcess, makeTempDir, removeTempDir } from '../../src/services/managed-process.js';
import { freePort, startOnFreePorts } from '../../src/services/ports.js';
import { monitorGet, natsServerBinary } from '../../src/services/nats.js';

export type NatsUser = 'admin' | 'restricted';

export interface PermissionedNats {
  readonly url: string;
  readonly pid: number;
  connect(user: NatsUser): Promise<NatsConnection>;
  /** Subjects `restricted` may not publish to from now on (the server reloads its configuration). */
  deny(subjects: string[]): Promise<void>;
  stop(): Promise<void>;
}

/** When the server last (re)loaded its configuration (/varz). */
async function configLoadTime(monitorPort: number): Promise<string | null> {
  const varz = await monitorGet(monitorPort, '/varz');
  try {
    return (JSON.parse(varz?.body ?? '') as { config_load_time?: string }).config_load_time ?? null;
  } catch {
    return null;
  }
}

export async function startPermissionedNats(denied: string[]): Promise<PermissionedNats> {
  const dir = makeTempDir('nats-perm');
  const storeDir = join(dir, 'jetstream');
  mkdirSync(storeDir, { recursive: true });
  const configFile = join(dir, 'nats.conf');
  let port = 0;
  let monitorPort = 0;
  const write = (deny: string[]): void => {
    const permissions = `{ publish: { allow: [">"]${deny.length > 0 ? `, deny: ${JSON.stringify(deny)}` : ''} }, subscribe: { allow: [">"] } }`;
    writeFileSync(
      configFile,
      [
        `listen: "127.0.0.1:${port}"`,
        `http: "127.0.0.1:${monitorPort}"`,
        `jetstream { store_dir: ${JSON.stringify(storeDir)} }`,
        'authorization {',
        '  users: [',
        '    { user: "admin", password: "admin" }',
        `    { user: "restricted", password: "restricted", permissions: ${permissions} }`,
        '  ]',
        '}',
        '',
      ].join('\n'),
    );
  };
  const proc = await startOnFreePorts(false, async () => {
    port = await freePort();
    monitorPort = await freePort();
    write(denied);
    const p = new ManagedProcess({
      name: 'nats-server',
      binary: natsServerBinary(),
      args: ['-c', configFile],
      isReady: async () => (await monitorGet(monitorPort, '/healthz'))?.status === 200,
    });
    await p.start();
    return p;
  }).catch((err: unknown) => {
    removeTempDir(dir);
    throw err;
  });
  const url = `nats://127.0.0.1:${port}`;
  return {
    url,
    pid: proc.pid!,
    connect: (user) => connect({ servers: url, user, pass: user, maxReconnectAttempts: -1, reconnectTimeWait: 100 }),
    async deny(subjects) {
      const before = await configLoadTime(monitorPort);
      write(subjects);
      process.kill(proc.pid!, 'SIGHUP');
      // The server says when the new configuration is in force (its load time changes).
      for (let i = 0; i < 400; i++) {
        const now = await configLoadTime(monitorPort);
        if (now !== null && now !== before) return;
        await new Promise((r) => setTimeout(r, 25));
      }
      throw new Error(`nats-server did not reload its configuration:\n${proc.logTail()}`);
    },
    async stop() {
      await proc.terminate('SIGTERM');
      removeTempDir(dir);
    },
  };
}
