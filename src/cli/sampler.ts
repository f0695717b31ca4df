/** `laminar sampler`: the experience sampler as a local service for a trainer in another process (Python), batches in shared memory. */
import { Command, Option } from 'commander';
import { createLogger } from '../common/logger.js';
import { exitOnUnexpectedRejection } from '../common/fatal.js';
import { watchEventLoop } from '../common/event-loop.js';
import { createRegistry, serveMetrics, type MetricsServer } from '../common/metrics.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { DEFAULT_SHM_DIR } from '../relay/protocol/defaults.js';
import {
  DEFAULT_SAMPLER_METRICS_PORT,
  PREFETCH_MODES,
  SAMPLER_STRATEGIES,
  parseSamplerServiceOptions,
  startSamplerService,
  type SamplerServiceInput,
} from '../data/sampler-service/index.js';
import { InvalidInputError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { stopOnSignals } from './stop-on-signals.js';

type Opts = Record<string, string | boolean | undefined>;

/** Flags of the sampler itself, handed to parseSamplerServiceOptions as given. */
const SAMPLER_FLAGS: ReadonlyArray<keyof SamplerServiceInput> = [
  'buffer',
  'replicas',
  'maxStreamBytes',
  'duplicateWindow',
  'batchSize',
  'strategy',
  'groupOrder',
  'priorityExponent',
  'maxStaleness',
  'stalenessMode',
  'stalenessDecay',
  'seed',
  'maxItems',
  'maxBytes',
  'eviction',
  'maxTimesSampled',
  'minSizeToSample',
  'samplesPerInsert',
  'errorBuffer',
  'prefetch',
  'spareArenas',
  'trainerVersion',
  'fetchConcurrency',
  'orphanChunkAge',
  'maxDeletionDelay',
  'shmDir',
  'socket',
  'socketMode',
  'fileMode',
  'maxFrame',
];

export function samplerCommand(): Command {
  const opt = (flags: string, description: string, env: string): Option => new Option(flags, description).env(`LAMINAR_${env}`);
  return addControlFlags(new Command('sampler'), true)
    .description(
      'run the experience sampler as a local service: batches of the buffer are assembled in shared-memory files and handed to a trainer ' +
        'in another process (laminar.data.Sampler in Python) over a unix socket, zero-copy',
    )
    .addOption(opt('--buffer <name>', 'experience buffer to sample (stream LAMINAR_EXP_<name>), as the writers name it (default: default)', 'BUFFER'))
    .addOption(opt('--batch-size <n>', 'trajectories per batch (with --strategy groups: a sum of whole group sizes)', 'BATCH_SIZE').makeOptionMandatory())
    .addOption(
      opt(
        '--strategy <name>',
        `sampling strategy: ${SAMPLER_STRATEGIES.join(', ')} (default: fifo; groups: whole GRPO groups; prioritized: by priority, see updatePriority)`,
        'STRATEGY',
      ),
    )
    .addOption(opt('--group-order <order>', 'with --strategy groups: complete groups oldest first (fifo, default) or at random (uniform)', 'GROUP_ORDER'))
    .addOption(opt('--priority-exponent <x>', 'with --strategy prioritized: P(i) ∝ priority^x (0: uniform, 1: proportional, default 1)', 'PRIORITY_EXPONENT'))
    .addOption(
      opt('--max-staleness <n>', 'staleness bound: trajectories more than n versions behind the trainer are dropped or down-weighted', 'MAX_STALENESS'),
    )
    .addOption(
      opt(
        '--staleness-mode <mode>',
        'with --max-staleness: drop (default: evicted, counted as stale; the strategy samples the rest) or downweight (needs --strategy prioritized)',
        'STALENESS_MODE',
      ),
    )
    .addOption(
      opt('--staleness-decay <x>', 'with --staleness-mode downweight: weight factor per version beyond the bound, in (0, 1] (default 0.5)', 'STALENESS_DECAY'),
    )
    .addOption(opt('--seed <n>', "seed of the sampler's random source (uniform, prioritized, groups in uniform order)", 'SEED'))
    .addOption(opt('--max-items <n>', 'buffer capacity in trajectories; beyond it the eviction policy removes some (default 100000)', 'MAX_ITEMS'))
    .addOption(opt('--max-bytes <bytes>', 'buffer capacity in payload bytes, e.g. 16GiB (default 16GiB)', 'MAX_BYTES'))
    .addOption(opt('--eviction <policy>', 'which trajectories go first when over capacity: oldest (default) or most-stale', 'EVICTION'))
    .addOption(opt('--max-times-sampled <n>', 'remove a trajectory once sampled n times; inf keeps them (default 1: each trains once)', 'MAX_TIMES_SAMPLED'))
    .addOption(opt('--min-size-to-sample <n>', 'rate limit: sample only once the buffer holds n trajectories (default 1)', 'MIN_SIZE_TO_SAMPLE'))
    .addOption(opt('--samples-per-insert <x>', 'rate limit: keep samples within --error-buffer of inserts × x (default: no limit)', 'SAMPLES_PER_INSERT'))
    .addOption(opt('--error-buffer <n>', 'with --samples-per-insert: tolerance in samples around the target ratio (default: one batch)', 'ERROR_BUFFER'))
    .addOption(
      opt(
        '--prefetch <mode>',
        `when the next batch is assembled: ${PREFETCH_MODES.join(', ')} (default on: as soon as a batch is handed over; ` +
          'after-release: once the trainer releases it, into its memory; off: inside sample)',
        'PREFETCH',
      ),
    )
    .addOption(opt('--spare-arenas <n>', 'arena files of released batches kept for the next batches (default 1; 0: never reuse)', 'SPARE_ARENAS'))
    .addOption(opt('--trainer-version <n>', "the trainer's weight version at start (staleness = trainer - trajectory version; default 0)", 'TRAINER_VERSION'))
    .addOption(opt('--fetch-concurrency <n>', 'direct gets in flight while loading a batch (default 64)', 'FETCH_CONCURRENCY'))
    .addOption(opt('--orphan-chunk-age <duration>', 'chunks no record claimed this long after they were stored are deleted (default 15m)', 'ORPHAN_CHUNK_AGE'))
    .addOption(
      opt(
        '--max-deletion-delay <duration>',
        'sampled-out records are deleted between batch assemblies, waiting at most this long (default 10s)',
        'MAX_DELETION_DELAY',
      ),
    )
    .addOption(opt('--replicas <n>', 'replicas of the buffer stream if the sampler creates it (3 on a NATS cluster; default 1)', 'REPLICAS'))
    .addOption(opt('--max-stream-bytes <bytes>', 'hard ceiling of the stream if the sampler creates it (writers then get ERR_BUFFER_FULL)', 'MAX_STREAM_BYTES'))
    .addOption(opt('--duplicate-window <duration>', 'window of duplicate detection of the stream if the sampler creates it (default 2m)', 'DUPLICATE_WINDOW'))
    .addOption(opt('--shm-dir <dir>', `directory of the arena files, a tmpfs (default: ${DEFAULT_SHM_DIR})`, 'SHM_DIR'))
    .addOption(opt('--socket <path>', 'unix socket of the service (default: <shm-dir>/sampler-<buffer>.sock)', 'SAMPLER_SOCKET'))
    .addOption(opt('--socket-mode <octal>', 'permissions of the socket file (default 660)', 'SAMPLER_SOCKET_MODE'))
    .addOption(opt('--file-mode <octal>', "permissions of the arena files (the trainer's user or group reads them; default 640)", 'SAMPLER_FILE_MODE'))
    .addOption(opt('--max-frame <bytes>', 'largest protocol frame (requests, and a batch descriptor; default 16MiB)', 'MAX_FRAME'))
    .addOption(new Option('--metrics-host <host>', 'address of /metrics').env('LAMINAR_METRICS_HOST').default('127.0.0.1'))
    .addOption(
      new Option('--metrics-port <port>', 'port of /metrics (0: any free port, -1: disabled)')
        .env('LAMINAR_SAMPLER_METRICS_PORT')
        .default(String(DEFAULT_SAMPLER_METRICS_PORT)),
    )
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .action(async (opts: Opts) => {
      const logger = createLogger({ level: opts.logLevel as 'info', name: 'laminar-sampler' });
      const input: SamplerServiceInput = {};
      for (const key of SAMPLER_FLAGS) if (typeof opts[key] === 'string') input[key] = opts[key];
      const config = parseSamplerServiceOptions(input);
      const metricsPort = Number(opts.metricsPort);
      if (!Number.isInteger(metricsPort) || metricsPort < -1 || metricsPort > 65535) {
        throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--metrics-port: must be an integer in [-1, 65535], got ${JSON.stringify(opts.metricsPort)}`);
      }
      const control = parseControlOptions(controlInput(opts)!);
      const nc = await connectControl(control, `sampler ${config.sampler.buffer ?? 'default'} ${process.pid}`);
      const registry = createRegistry();
      // A rejection nobody handled is a bug after which the service's state may be inconsistent:
      // exit (status 70) for the service manager to restart it; the trainer's client reconnects.
      exitOnUnexpectedRejection(logger, registry);
      let service: Awaited<ReturnType<typeof startSamplerService>>;
      let http: MetricsServer | null = null;
      try {
        service = await startSamplerService(config, { nc, registry, logger });
      } catch (err) {
        await nc.close().catch(() => undefined);
        throw err;
      }
      try {
        http = metricsPort >= 0 ? await serveMetrics(registry, { host: opts.metricsHost as string, port: metricsPort }) : null;
      } catch (err) {
        await service.close();
        await nc.close().catch(() => undefined);
        throw err;
      }
      watchEventLoop({ registry, log: logger });
      logger.info(
        {
          socket: service.socketPath,
          instance: service.instance,
          buffer: service.sampler.names.buffer,
          batchSize: config.sampler.batchSize,
          strategy: config.strategyName,
          shmDir: config.shmDir,
          metricsPort: http?.port ?? null,
        },
        'sampler ready',
      );
      stopOnSignals({
        logger,
        close: async () => {
          await service.close();
          await http?.close();
          await nc.drain().catch(() => undefined);
          logger.info('sampler service stopped');
        },
      });
    });
}
