/** `laminar sim-trainer`: a simulated trainer (samples the experience buffer, publishes synthetic weight versions). */
import { Command, Option } from 'commander';
import { createLogger } from '../common/logger.js';
import { createRegistry, serveMetrics, type MetricsServer } from '../common/metrics.js';
import { parseBytes, parseDuration } from '../common/units.js';
import { parseControlOptions } from '../control/nats-options.js';
import { SimTrainer, formatStep, removalJson, stepJson } from '../stand-ins/trainer/sim-trainer.js';
import { SIM_TRAINER_STRATEGIES, SimTrainerOptionError } from '../stand-ins/trainer/options.js';
import { addControlFlags, controlInput } from './control-flags.js';

type Opts = Record<string, string | boolean | undefined>;

export function simTrainerCommand(): Command {
  return addControlFlags(new Command('sim-trainer'), true)
    .description(
      'run a simulated trainer: publishes an initial weight version, then repeatedly samples a batch from the experience buffer, ' +
        '"trains" for --train-time and publishes the next version with synthetic tensors through the master relay',
    )
    .addOption(new Option('--model <id>', 'model id of the published versions').env('LAMINAR_MODEL').default('sim/policy'))
    .addOption(new Option('--size <bytes>', 'bytes of one weight version (BF16), e.g. 64MiB, 14GB').env('LAMINAR_SIM_SIZE').default('64MiB'))
    .addOption(new Option('--tensors <n>', 'tensors a version is split into').env('LAMINAR_SIM_TENSORS').default('8'))
    .addOption(
      new Option('--batch-size <n>', 'trajectories per batch (with --strategy groups: a sum of whole group sizes)').env('LAMINAR_BATCH_SIZE').default('64'),
    )
    .addOption(
      new Option('--strategy <name>', `sampling strategy: ${SIM_TRAINER_STRATEGIES.join(', ')} (groups: whole GRPO groups)`)
        .env('LAMINAR_STRATEGY')
        .default('fifo'),
    )
    .addOption(
      new Option('--max-staleness <n>', 'drop trajectories more than n versions behind the trainer (staleness-bounded sampling)').env('LAMINAR_MAX_STALENESS'),
    )
    .addOption(new Option('--train-time <duration>', 'simulated time of one training step').env('LAMINAR_TRAIN_TIME').default('2s'))
    .addOption(new Option('--time-scale <x>', 'simulated seconds per wall-clock second (10: a 2s step takes 200ms)').env('LAMINAR_TIME_SCALE').default('1'))
    .addOption(new Option('--steps <n>', 'stop after n training steps (default: run until stopped)').env('LAMINAR_STEPS'))
    .addOption(new Option('--duration <duration>', 'stop after this much wall-clock time, e.g. 10m (the step in hand is finished)').env('LAMINAR_DURATION'))
    .addOption(new Option('--start-version <n>', 'weight version the trainer starts at').env('LAMINAR_START_VERSION').default('0'))
    .addOption(new Option('--no-initial-publish', 'do not publish the start version before the first step'))
    .addOption(
      new Option('--buffer <name>', 'experience buffer to sample (stream LAMINAR_EXP_<name>), as the writers name it').env('LAMINAR_BUFFER').default('default'),
    )
    .addOption(
      new Option('--replicas <n>', 'replicas of the buffer stream if the trainer creates it (3 on a NATS cluster)').env('LAMINAR_REPLICAS').default('1'),
    )
    .addOption(new Option('--seed <n>', "seed of the sampler's random source (uniform)").env('LAMINAR_SEED'))
    .addOption(new Option('--no-prefetch', 'do not assemble the next batch while the current one trains'))
    .addOption(new Option('--id <name>', 'member id of this trainer (default: trainer-<host>)').env('LAMINAR_TRAINER_ID'))
    .addOption(new Option('--host <name>', "host name compared with the master relay's (same host: write into its shared memory)").env('LAMINAR_HOST'))
    .addOption(new Option('--secret-file <file>', 'file holding the job secret for pushes to a remote master (or LAMINAR_SECRET)').env('LAMINAR_SECRET_FILE'))
    .addOption(new Option('--chunk-size <bytes|auto>', "chunk size of remote pushes (default, auto: the master's choice)").env('LAMINAR_CHUNK_SIZE'))
    .addOption(new Option('--master-wait <duration>', 'how long a publish waits for a master relay').env('LAMINAR_MASTER_WAIT').default('60s'))
    .addOption(new Option('--force-remote', 'push over UCX even when the master runs on this host'))
    .addOption(new Option('--metrics-host <host>', 'address of /metrics').env('LAMINAR_METRICS_HOST').default('127.0.0.1'))
    .addOption(new Option('--metrics-port <port>', 'port of /metrics (0: any free port, -1: disabled)').env('LAMINAR_METRICS_PORT').default('-1'))
    .addOption(
      new Option(
        '--json',
        'one JSON line per step on stdout: {step, version, batch, sample_ms, train_ms, publish_stall_ms, staleness: {p50, max, mean, histogram}, inherent: {p50, max, mean, histogram}} (consumption and inherent staleness)',
      ),
    )
    .addOption(new Option('--checksums', 'with --json: one line {published, kind, sha256} per version published (SHA-256 of its bytes, for audits)'))
    .addOption(
      new Option(
        '--removals',
        'with --json: one line {removed, ids} each time trajectories leave the buffer (sampled, stale, capacity), written before their records are deleted (for audits)',
      ),
    )
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .action(async (opts: Opts) => {
      const str = (k: string): string | undefined => (typeof opts[k] === 'string' ? opts[k] : undefined);
      const logger = createLogger({ level: opts.logLevel as 'info', name: 'laminar-sim-trainer' });
      const metricsPort = Number(str('metricsPort'));
      if (!Number.isInteger(metricsPort) || metricsPort < -1 || metricsPort > 65535) {
        throw new SimTrainerOptionError('metrics-port', `must be an integer in [-1, 65535], got ${JSON.stringify(str('metricsPort'))}`, str('metricsPort'));
      }
      const trainer = {
        ...(str('id') ? { id: str('id')! } : {}),
        ...(str('host') ? { host: str('host')! } : {}),
        ...(str('secretFile') ? { secretFile: str('secretFile')! } : {}),
        ...(process.env.LAMINAR_SECRET ? { secret: process.env.LAMINAR_SECRET } : {}),
        ...(str('chunkSize') && str('chunkSize') !== 'auto' ? { chunkSize: flag('chunk-size', () => parseBytes(str('chunkSize')!)) } : {}),
        masterWaitMs: flag('master-wait', () => parseDuration(str('masterWait')!)),
        ...(opts.forceRemote === true ? { forceRemote: true } : {}),
      };
      const registry = createRegistry();
      const sim = await SimTrainer.open({
        model: str('model'),
        size: str('size'),
        tensors: str('tensors'),
        batchSize: str('batchSize'),
        strategy: str('strategy'),
        maxStaleness: str('maxStaleness'),
        trainTime: str('trainTime'),
        timeScale: str('timeScale'),
        steps: str('steps'),
        duration: str('duration'),
        startVersion: str('startVersion'),
        initialPublish: opts.initialPublish !== false,
        buffer: str('buffer'),
        replicas: str('replicas'),
        seed: str('seed'),
        prefetch: opts.prefetch !== false,
        control: parseControlOptions(controlInput(opts)!),
        trainer,
        registry,
        logger,
        // stdout to a pipe is synchronous on Linux: the line is out before the deleter's request is sent.
        ...(opts.json === true && opts.removals === true
          ? { sampler: { onEvict: (entries, reason) => process.stdout.write(`${JSON.stringify(removalJson(entries, reason))}\n`) } }
          : {}),
      });
      let http: MetricsServer | null = null;
      try {
        http = metricsPort >= 0 ? await serveMetrics(registry, { host: str('metricsHost')!, port: metricsPort }) : null;
      } catch (err) {
        await sim.close();
        throw err;
      }
      if (http) logger.info({ port: http.port }, 'serving /metrics');
      const json = opts.json === true;
      const checksums = opts.checksums === true;
      sim.events.on('published', (p) => {
        if (p.kind === 'initial' && !json) process.stderr.write(`published initial v${p.version} of ${sim.config.model}: stall ${p.stallMs.toFixed(0)} ms\n`);
        if (json && checksums) process.stdout.write(`${JSON.stringify({ published: p.version, kind: p.kind, sha256: sim.publishedChecksum() })}\n`);
      });
      sim.events.on('step', (s) => {
        if (json) process.stdout.write(`${JSON.stringify(stepJson(s))}\n`);
        else process.stderr.write(`${formatStep(s)}\n`);
      });
      let signals = 0;
      const onSignal = (signal: string): void => {
        signals++;
        if (signals === 1) {
          logger.info({ signal }, 'stopping after the current step (again: abandon the step)');
          void sim.stop();
        } else if (signals === 2) {
          logger.warn({ signal }, 'abandoning the current step (again: exit now)');
          void sim.stop({ abortStep: true });
        } else {
          process.exit(1);
        }
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        const summary = await sim.run();
        if (!json)
          process.stderr.write(
            `stopped (${summary.reason}): ${summary.steps} steps, ${summary.trajectories} trajectories, newest version v${summary.version}\n`,
          );
      } finally {
        await http?.close();
      }
      process.exit(0);
    });
}

/** Runs a parser, naming the flag in its error. */
function flag<T>(name: string, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    throw new SimTrainerOptionError(name, (err as Error).message);
  }
}
