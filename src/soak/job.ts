/**
 * The job the soak runs: the demo's whole job (embedded nats-server and redis-server, a manager
 * and a standby, relays, a simulated trainer, simulated rollouts), every daemon under a
 * Supervised restart policy. With a testbed, each relay runs in its own network namespace (a
 * host of its own, whose link a fault can stall) and the trainer on a host of its own that pushes
 * over UCX; without one, everything runs on loopback.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseBytes } from '../common/units.js';
import { spawnDaemon, type Daemon } from '../services/daemon-process.js';
import type { Stage } from '../demo/stage.js';
import { simRolloutArgv } from '../demo/sim-rollout-argv.js';
import type { Testbed } from '../testing/testbed.js';
import { Supervised, type SupervisedEvents } from './supervisor.js';

export const SOAK_MODEL = 'soak/policy';
/**
 * How long a daemon may take to start before the soak counts the start as failed and tries again,
 * as systemd's TimeoutStartSec (90 s) would, with margin: a trainer restarted over a buffer of a
 * million records took longer than the 30 s of the first 2-hour run and never came back.
 */
const START_TIMEOUT_MS = 180_000;
/** The relays' UCX port on testbed hosts (each host is a namespace of its own). */
const RELAY_PORT = 13337;

export interface SoakJobOptions {
  stage: Stage;
  testbed: Testbed | null;
  relays: number;
  rollouts: number;
  /** Bytes of a weight version (e.g. '8MiB'). */
  size: string;
  tensors: number;
  timeScale: number;
  events: SupervisedEvents;
  restartDelayMs: number;
  /** Trainer records: the newest version it published (a restarted trainer goes on after it). */
  nextTrainerVersion: () => number;
  onTrainerLine: (line: string) => void;
}

export interface RelayProcess extends Supervised {
  readonly id: string;
  readonly socket: string;
  /** Its testbed host (1-based), when it runs on the testbed. */
  readonly host: number | null;
  /** From its latest ready line. */
  ucxPort(): number | null;
  segmentDir(): string | null;
}

export interface SoakJob {
  managers: Supervised[];
  relays: RelayProcess[];
  rollouts: Supervised[];
  trainer: Supervised;
  all(): Supervised[];
  /** Starts every daemon (each start retried until it comes up or is stopped). */
  start(): Promise<void>;
  /** Where a daemon's /metrics listens: its testbed host's address, or loopback. */
  metricsHost(proc: Supervised): string;
  /** Manager HTTP port of each manager that is up. */
  managerPorts(): number[];
}

/** Manager timings: short, so that failover happens many times in a run. */
export const MANAGER_TIMINGS = { suspectAfter: '1500ms', deadAfter: '3000ms', orphanWait: '10s', lease: '3s' } as const;

/** The job's daemons, not started yet. */
export function createSoakJob(options: SoakJobOptions): SoakJob {
  const { stage, testbed } = options;
  const env = { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' };
  const rootNats = stage.natsUrl;
  const bedNats = testbed ? stage.natsPorts.map((port) => `nats://${testbed.gateway}:${port}`).join(',') : rootNats;
  const scaled = (simMs: number): string => `${Math.max(20, Math.round(simMs / options.timeScale))}ms`;
  const spawnKept = async (name: string, argv: string[], ready: string, wrap: string[] = [], onStdout?: (line: string) => void): Promise<Daemon> =>
    stage.keep(await spawnDaemon(name, argv, ready, wrap, env, onStdout, START_TIMEOUT_MS));

  const managers = ['manager-a', 'manager-b'].map(
    (id) =>
      new Supervised(
        id,
        'manager',
        () =>
          spawnKept(
            id,
            [
              'manager',
              '--nats',
              rootNats,
              '--log-level',
              'info',
              '--id',
              id,
              '--http-port',
              '0',
              '--redis',
              stage.redisServer.url,
              '--model',
              SOAK_MODEL,
              '--lease',
              MANAGER_TIMINGS.lease,
              '--suspect-after',
              MANAGER_TIMINGS.suspectAfter,
              '--dead-after',
              MANAGER_TIMINGS.deadAfter,
              '--orphan-wait',
              MANAGER_TIMINGS.orphanWait,
              '--repack-interval',
              scaled(5000),
            ],
            'manager started',
          ),
        options.events,
        options.restartDelayMs,
      ),
  );

  const relays: RelayProcess[] = [];
  for (let i = 0; i < options.relays; i++) {
    const id = `r${i}`;
    const host = testbed ? testbed.hosts[i]! : null;
    const socket = join(stage.root, `${id}.sock`);
    const shmDir = join(stage.root, id);
    mkdirSync(shmDir, { recursive: true });
    const address = host?.address ?? '127.0.0.1';
    // On a host of its own every port is free (and a stall names it); on loopback the kernel picks one.
    const port = host ? RELAY_PORT : 0;
    const argv = [
      'relay',
      '--nats',
      bedNats,
      '--log-level',
      'info',
      '--id',
      id,
      '--host',
      `host${i}`,
      '--listen',
      `${address}:${port}`,
      '--shm-dir',
      shmDir,
      '--socket',
      socket,
      '--no-pin',
      '--secret-file',
      stage.secretFile,
      '--heartbeat',
      '500ms',
      '--metrics-host',
      address,
      '--metrics-port',
      '0',
      '--keep-versions',
      '1',
      // Room for what rollouts lease plus one arriving version; the fill-shm fault exceeds it.
      '--memory-budget',
      String(5 * parseBytes(options.size)),
      '--chunk-size',
      '2MiB',
      '--peer-timeout',
      '3s',
      '--retry-interval',
      '500ms',
      // Relays in a namespace of their own cannot mount: they would fall back with a warning.
      ...(testbed ? ['--huge-pages', 'off'] : []),
    ];
    const wrap = host ? ['ip', 'netns', 'exec', host.netns] : [];
    const proc = new Supervised(`relay ${id}`, 'relay', () => spawnKept(`relay ${id}`, argv, 'relay ready', wrap), options.events, options.restartDelayMs);
    relays.push(
      Object.assign(proc, {
        id,
        socket,
        host: host?.index ?? null,
        ucxPort: () => (typeof proc.daemon?.ready.ucxPort === 'number' ? proc.daemon.ready.ucxPort : null),
        segmentDir: () => (typeof proc.daemon?.ready.segmentDir === 'string' ? proc.daemon.ready.segmentDir : null),
      }),
    );
  }

  const trainerHost = testbed ? testbed.hosts[options.relays]! : null;
  const trainer = new Supervised(
    'trainer',
    'trainer',
    async () =>
      withMetricsPort(
        await spawnKept(
          'trainer',
          [
            'sim-trainer',
            '--nats',
            bedNats,
            '--log-level',
            'info',
            '--model',
            SOAK_MODEL,
            '--size',
            options.size,
            '--tensors',
            String(options.tensors),
            // Balanced, as the paper tunes its placements: a step takes about what the rollouts
            // produce in its time (~200 trajectories a second at the defaults), so the buffer
            // neither starves the trainer nor grows with the run; what falls more than four
            // versions behind (the backlog of a trainer restart) is dropped as stale, not trained on.
            '--batch-size',
            '512',
            '--strategy',
            'groups',
            '--max-staleness',
            '4',
            '--train-time',
            '20s',
            '--time-scale',
            String(options.timeScale),
            '--host',
            trainerHost ? 'trainer-host' : 'host0',
            '--secret-file',
            stage.secretFile,
            '--start-version',
            String(options.nextTrainerVersion()),
            '--json',
            '--checksums',
            '--removals',
            '--metrics-host',
            trainerHost?.address ?? '127.0.0.1',
            '--metrics-port',
            '0',
          ],
          'simulated trainer started',
          trainerHost ? ['ip', 'netns', 'exec', trainerHost.netns] : [],
          options.onTrainerLine,
        ),
      ),
    options.events,
    options.restartDelayMs,
  );

  const rollouts: Supervised[] = [];
  for (let i = 0; i < options.rollouts; i++) {
    const relay = relays[i % relays.length]!;
    const id = `ro${i}`;
    rollouts.push(
      new Supervised(
        `rollout ${id}`,
        'rollout',
        () =>
          spawnKept(
            `rollout ${id}`,
            simRolloutArgv({
              id,
              nats: rootNats,
              redis: stage.redisServer.url,
              relaySocket: relay.socket,
              host: `host${i % relays.length}`,
              model: SOAK_MODEL,
              timeScale: options.timeScale,
              seed: i + 1,
            }),
            'sim-rollout started',
          ),
        options.events,
        options.restartDelayMs,
      ),
    );
  }

  const all = (): Supervised[] => [...managers, ...relays, trainer, ...rollouts];
  return {
    managers,
    relays,
    rollouts,
    trainer,
    all,
    async start() {
      // Managers first (a relay registers with whoever leads), then relays, the trainer, the rollouts.
      await Promise.all(managers.map((m) => m.start()));
      await Promise.all(relays.map((r) => r.start()));
      await trainer.start();
      await Promise.all(rollouts.map((r) => r.start()));
    },
    metricsHost: (proc) => {
      const relay = relays.find((r) => r === proc);
      if (relay?.host) return testbed!.hosts[relay.host - 1]!.address;
      return proc === trainer && trainerHost ? trainerHost.address : '127.0.0.1';
    },
    managerPorts: () => managers.flatMap((m) => (typeof m.daemon?.ready.httpPort === 'number' ? [m.daemon.ready.httpPort] : [])),
  };
}

/** The sim-trainer logs its /metrics port on a line of its own before its ready line: kept as ready.metricsPort. */
function withMetricsPort(daemon: Daemon): Daemon {
  for (const line of daemon.logs) {
    try {
      const entry = JSON.parse(line) as { msg?: string; port?: number };
      if (entry.msg === 'serving /metrics' && typeof entry.port === 'number') daemon.ready.metricsPort ??= entry.port;
    } catch {
      // not a JSON line
    }
  }
  return daemon;
}
