/**
 * A laminar cluster on the network-namespace testbed (scripts/testbed.sh): nats-server and the
 * manager(s) in the root namespace (reached on the bridge's address), one relay process per host
 * namespace started with only the NATS address, and a trainer client. Used by the manager fault
 * tests and by `npm run bench -- failover`.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { pino, type Logger } from 'pino';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { processRunning } from '../src/common/process.js';
import { checksumHex, Mapping } from '../src/native/index.js';
import { startNatsServer, type NatsServer } from '../src/services/nats.js';
import { RelayClient } from '../src/relay/client/relay-client.js';
import { TrainerClient } from '../src/trainer/trainer-client.js';
import { controlNames } from '../src/control/subjects.js';
import type { ManagerStatus } from '../src/manager/manager.js';

const REPO = fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../..' : '..', import.meta.url));
const TESTBED = join(REPO, 'scripts/testbed.sh');
export const BROADCAST_PORT = 13337;
/**
 * UCX's TCP transport moves data on its own sockets, not on the listener's port: relays here
 * take those ports from a 64-port block that holds the listener too (13312-13375), so that one
 * tc match (port & 0xffc0) catches all of a relay's broadcast traffic.
 */
const UCX_PORT_BLOCK = '13312/0xffc0';
const UCX_DATA_PORTS = '13340-13375';
const SECRET = 'cluster-job-secret-0123456789abcdef';
const SCRATCH_PREFIX = 'laminar-cluster-';
/** In each cluster's scratch directory: the process that owns it, its testbed and nats-server. */
const OWNER_FILE = 'owner.json';

interface ClusterOwner {
  pid: number;
  bed: string;
  natsPid: number | undefined;
  natsDir: string;
}

/**
 * Removes what clusters of processes that are gone left behind: a SIGKILLed or OOM-killed run
 * cannot clean up, and its scratch directory holds a gigabyte or more of segments per relay (in
 * RAM: the next run would start short of memory), its testbed makes the next `up` of the same
 * bed fail, and its nats-server and relays run on (`testbed.sh down` stops what runs in the
 * hosts). A cluster whose process still runs is left alone.
 */
function sweepAbandonedClusters(): void {
  for (const name of readdirSync('/dev/shm').filter((n) => n.startsWith(SCRATCH_PREFIX))) {
    const dir = join('/dev/shm', name);
    let owner: ClusterOwner;
    try {
      owner = JSON.parse(readFileSync(join(dir, OWNER_FILE), 'utf8')) as ClusterOwner;
    } catch {
      continue; // not one of ours, or still being created
    }
    if (processRunning(owner.pid)) continue;
    try {
      execFileSync(TESTBED, ['down', owner.bed], { stdio: 'ignore' });
    } catch {
      // best effort: `up` says what is in the way
    }
    if (owner.natsPid !== undefined && processRunning(owner.natsPid) && commandOf(owner.natsPid).includes('nats-server'))
      process.kill(owner.natsPid, 'SIGKILL');
    removeShmTree(owner.natsDir);
    removeShmTree(dir);
    process.stderr.write(`cluster: removed ${dir} and testbed ${owner.bed}, left by process ${owner.pid} (gone)\n`);
  }
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

export { spawnDaemon, type Daemon } from '../src/services/daemon-process.js';
import { spawnDaemon, type Daemon } from '../src/services/daemon-process.js';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';

export interface ClusterRelay {
  id: string;
  host: number;
  root: string;
  daemon: Daemon;
  client: RelayClient;
}

export interface ClusterOptions {
  bed: string;
  hosts: number;
  rate?: string;
  net: string;
  /** The relays' --chunk-size (default 4MiB); 'auto': they choose, and the trainer takes the master's choice. */
  chunkSize?: string;
  /** Ctrl-C / SIGTERM stop the cluster and exit (a benchmark run from a terminal; not in tests). */
  stopOnSignals?: boolean;
  relayArgs?: string[];
  managerArgs?: string[];
}

export class NetnsCluster {
  readonly relays = new Map<string, ClusterRelay>();
  readonly managers: Daemon[] = [];
  private readonly killedRoots: string[] = [];
  /** Every daemon started, kept for LAMINAR_BENCH_LOGS (a killed one's logs tell most). */
  private readonly started: Daemon[] = [];
  readonly secretFile: string;
  readonly gateway: string;
  private readonly scratch: string;
  private nc: NatsConnection | null = null;
  private constructor(
    readonly options: ClusterOptions,
    readonly nats: NatsServer,
    readonly hostNs: { ns: string; address: string }[],
    scratch: string,
  ) {
    this.scratch = scratch;
    this.gateway = `${options.net}.254`;
    this.secretFile = join(scratch, 'secret');
    writeFileSync(this.secretFile, `${SECRET}\n`, { mode: 0o600 });
  }

  static async create(options: ClusterOptions): Promise<NetnsCluster> {
    sweepAbandonedClusters();
    try {
      execFileSync(TESTBED, ['up', options.bed, String(options.hosts), '--rate', options.rate ?? '1gbit', '--net', options.net], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
    } catch (err) {
      throw new Error(
        `this machine refused to build the network-namespace testbed (root and CAP_NET_ADMIN are needed): ${String((err as { stderr?: Buffer }).stderr ?? err)}`,
      );
    }
    process.once('exit', () => {
      try {
        execFileSync(TESTBED, ['down', options.bed], { stdio: 'ignore' });
      } catch {
        // best effort
      }
    });
    const hosts = execFileSync(TESTBED, ['list', options.bed], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .map((line) => {
        const [ns, address] = line.split(' ') as [string, string];
        return { ns, address };
      });
    const nats = await startNatsServer({ host: '0.0.0.0' });
    const scratch = mkdtempSync(join('/dev/shm', SCRATCH_PREFIX));
    writeFileSync(
      join(scratch, OWNER_FILE),
      JSON.stringify({ pid: process.pid, bed: options.bed, natsPid: nats.pid, natsDir: nats.rootDir } satisfies ClusterOwner),
    );
    const cluster = new NetnsCluster(options, nats, hosts, scratch);
    // Ctrl-C of a long run: stop every daemon and server (the exit hook removes the bed).
    const interrupted = (signal: NodeJS.Signals): void => {
      process.stderr.write(`\n${signal}: stopping the cluster\n`);
      void cluster.destroy().finally(() => process.exit(130));
    };
    if (options.stopOnSignals) {
      process.once('SIGINT', interrupted);
      process.once('SIGTERM', interrupted);
    }
    return cluster;
  }

  get natsUrl(): string {
    return `nats://${this.gateway}:${this.nats.port}`;
  }

  async control(): Promise<NatsConnection> {
    this.nc ??= await connect({ servers: this.nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    return this.nc;
  }

  async startManager(name: string, extra: string[] = []): Promise<Daemon> {
    const daemon = await spawnDaemon(
      name,
      [
        'manager',
        '--nats',
        this.natsUrl,
        '--id',
        name,
        '--http-port',
        '0',
        '--lease',
        '2s',
        '--dead-after',
        '3s',
        '--suspect-after',
        '1500ms',
        '--stall-timeout',
        '2s',
        ...(this.options.managerArgs ?? []),
        ...extra,
      ],
      'manager started',
    );
    this.managers.push(daemon);
    this.started.push(daemon);
    return daemon;
  }

  /** Starts relay r<i> on host i (0-based) with only the NATS address (and its own listen address). */
  async startRelay(i: number, options: { root?: string; labels?: string; extra?: string[] } = {}): Promise<ClusterRelay> {
    const host = this.hostNs[i]!;
    const root = options.root ?? mkdtempSync(join(this.scratch, `r${i}-`));
    const socket = join(root, 'relay.sock');
    const daemon = await spawnDaemon(
      `r${i}`,
      [
        'relay',
        '--nats',
        this.natsUrl,
        '--id',
        `r${i}`,
        '--host',
        `h${i}`,
        '--listen',
        `${host.address}:${BROADCAST_PORT}`,
        '--shm-dir',
        join(root, 'segments'),
        '--socket',
        socket,
        '--metrics-port',
        '0',
        '--metrics-host',
        '0.0.0.0',
        '--no-pin',
        '--secret-file',
        this.secretFile,
        '--chunk-size',
        this.options.chunkSize ?? '4MiB',
        '--keep-versions',
        '0',
        '--heartbeat',
        '500ms',
        '--peer-timeout',
        '3s',
        '--retry-interval',
        '1s',
        '--handshake-timeout',
        '2s',
        '--log-level',
        'info',
        ...(options.labels ? ['--labels', options.labels] : []),
        ...(this.options.relayArgs ?? []),
        ...(options.extra ?? []),
      ],
      'relay ready',
      ['ip', 'netns', 'exec', host.ns],
      { ...process.env, UCX_TLS: 'tcp', UCX_TCP_PORT_RANGE: UCX_DATA_PORTS },
    );
    this.started.push(daemon);
    const client = await RelayClient.connect({ socketPath: socket });
    const relay = { id: `r${i}`, host: i, root, daemon, client };
    this.relays.set(relay.id, relay);
    return relay;
  }

  /** Starves (or restores) host i's broadcast traffic while its other traffic (NATS) flows. */
  stall(i: number, on: boolean): void {
    execFileSync(TESTBED, ['stall', this.options.bed, String(i + 1), UCX_PORT_BLOCK, on ? 'on' : 'off', '--rate', this.options.rate ?? '1gbit'], {
      stdio: 'ignore',
    });
  }

  async kill(id: string): Promise<void> {
    const r = this.relays.get(id);
    if (!r) return;
    r.client.close();
    await r.daemon.kill('SIGKILL');
    this.relays.delete(id);
    this.killedRoots.push(r.root);
  }

  trainer(options: { host?: string; forceRemote?: boolean } = {}): Promise<TrainerClient> {
    return TrainerClient.connect({
      nats: { servers: [this.nats.url], job: 'laminar', connection: { maxReconnectAttempts: -1, reconnectTimeWait: 100 } },
      secretFile: this.secretFile,
      ...(this.options.chunkSize === 'auto' ? {} : { chunkSize: Number.parseInt(this.options.chunkSize ?? '4', 10) * 1024 * 1024 }),
      host: options.host ?? 'trainer-host',
      ...(options.forceRemote ? { forceRemote: true } : {}),
      masterWaitMs: 60_000,
      ...(process.env.LAMINAR_BENCH_LOGS ? { logger: benchTrainerLogger(process.env.LAMINAR_BENCH_LOGS) } : {}),
    });
  }

  async status(): Promise<ManagerStatus> {
    const nc = await this.control();
    const reply = await nc.request(controlNames('laminar').status, undefined, { timeout: 3000 });
    return JSON.parse(new TextDecoder().decode(reply.data)) as ManagerStatus;
  }

  /** Chunks of model/version verified on a relay (all of them once complete). */
  async progress(id: string, model: string, version: number): Promise<{ hwm: number; complete: boolean; path?: string }> {
    const r = this.relays.get(id)!;
    const status = await r.client.status();
    const held = status.versions.find((v) => v.model === model && v.version === version && v.state === 'complete');
    if (held) return { hwm: Number.MAX_SAFE_INTEGER, complete: true, path: held.path };
    return { hwm: status.broadcast?.receiving.find((p) => p.model === model && p.version === version)?.hwm ?? 0, complete: false };
  }

  async digest(id: string, model: string, version: number): Promise<string> {
    const p = await this.progress(id, model, version);
    if (!p.path) throw new Error(`${id} does not hold ${model} v${version}`);
    const m = new Mapping(p.path, { writable: false });
    try {
      return checksumHex(m.checksum(0, m.size));
    } finally {
      m.close();
    }
  }

  /** Counts from a relay's /metrics. */
  async relayMetric(id: string, name: string): Promise<number> {
    const relay = this.relays.get(id)!;
    const port = relay.daemon.ready.metricsPort as number;
    const text = await (await fetch(`http://${this.hostNs[relay.host]!.address}:${port}/metrics`)).text();
    let total = 0;
    for (const line of text.split('\n')) if (line.startsWith(name)) total += Number(line.split(' ').pop());
    return total;
  }

  /** Stops every relay and manager; the relays' shared memory goes with them. */
  async stopAll(): Promise<void> {
    for (const [id, relay] of [...this.relays]) {
      await this.kill(id);
      removeShmTree(relay.root);
    }
    for (const root of this.killedRoots.splice(0)) removeShmTree(root);
    for (const m of this.managers.splice(0)) await m.kill('SIGKILL');
  }

  async destroy(): Promise<void> {
    await this.stopAll();
    const logDir = process.env.LAMINAR_BENCH_LOGS;
    if (logDir) {
      // Daemons of the same name (restarts, fresh rounds) get numbered files.
      mkdirSync(logDir, { recursive: true });
      this.started.forEach((d, i) => writeFileSync(join(logDir, `${String(i).padStart(3, '0')}-${d.name}.log`), `${d.logs.join('\n')}\n`));
    }
    await this.nc?.close().catch(() => undefined);
    await this.nats.stop();
    execFileSync(TESTBED, ['down', this.options.bed], { stdio: 'ignore' });
    removeShmTree(this.scratch);
  }
}

export async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 60_000, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** The in-process trainers' log, appended to <dir>/trainer.log. */
function benchTrainerLogger(dir: string): Logger {
  mkdirSync(dir, { recursive: true });
  return pino({ level: 'debug' }, pino.destination({ dest: join(dir, 'trainer.log'), append: true, sync: true }));
}

/** A deterministic U8 tensor of `bytes` bytes. */
export function pattern(bytes: number, seed: number): Uint8Array {
  const data = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i += 4099) data[i] = (Math.imul(i, 13) + seed) & 0xff;
  return data;
}
