/** `laminar sim-rollout`: a simulated rollout engine on the real SDK and services. */
import { createPoolRedis } from '../data/prompts/redis-address.js';
import { Command, Option } from 'commander';
import { InvalidInputError, ErrorCodes } from '../common/errors.js';
import { createLogger } from '../common/logger.js';
import { watchEventLoop } from '../common/event-loop.js';
import { createRegistry, serveMetrics } from '../common/metrics.js';
import { parseDurationOption } from '../common/units.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { startSimRollout } from '../stand-ins/rollout/sim-rollout.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { stopOnSignals } from './stop-on-signals.js';
import { parseLabels } from '../relay/options.js';
import { promptPoolRedisOption } from './redis-flag.js';
import { parseReplicas, replicasOption } from './replicas-flag.js';

function positive(name: string, value: string, integer = true): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--${name} must be a positive ${integer ? 'integer' : 'number'}, got ${JSON.stringify(value)}`);
  }
  return n;
}

export function simRolloutCommand(): Command {
  return addControlFlags(new Command('sim-rollout'), true)
    .description('run a simulated rollout engine (continuous batching, KV cache, long-tail lengths) on the real rollout SDK')
    .addOption(new Option('--id <name>', 'rollout id in the job').env('LAMINAR_ROLLOUT_ID').makeOptionMandatory())
    .addOption(promptPoolRedisOption())
    .addOption(new Option('--relay-socket <path>', "the local relay's socket (weights); without it --fixed-version is used").env('LAMINAR_RELAY_SOCKET'))
    .addOption(new Option('--fixed-version <n>', 'generate with this weight version and no relay (tests)').env('LAMINAR_FIXED_VERSION'))
    .addOption(new Option('--model <name>', 'model whose weights the rollout pulls').env('LAMINAR_MODEL').default('sim/policy'))
    .addOption(new Option('--host <name>', 'host name reported to the manager').env('LAMINAR_HOST'))
    .addOption(new Option('--labels <k=v,...>', 'labels reported to the manager').env('LAMINAR_LABELS'))
    .addOption(new Option('--prompt-pool <name>', 'prompt pool name').env('LAMINAR_PROMPT_POOL').default('default'))
    .addOption(new Option('--partial-pool <name>', 'partial-response pool name').env('LAMINAR_PARTIAL_POOL').default('default'))
    .addOption(new Option('--buffer <name>', 'experience buffer name').env('LAMINAR_BUFFER').default('default'))
    .addOption(replicasOption('the experience buffer, the partial pool and the control bucket'))
    .addOption(new Option('--batch-prompts <n>', 'prompts claimed per batch (each brings n samples)').default('32'))
    .addOption(new Option('--kv-capacity <tokens>', 'KV cache capacity in tokens').default('65536'))
    .addOption(new Option('--roofline-batch <n>', 'decode batch up to which a step costs the same (B)').default('64'))
    .addOption(new Option('--max-running <n>', 'largest decode batch').default('256'))
    .addOption(new Option('--step-time <duration>', 'decode step time up to B').default('20ms'))
    .addOption(new Option('--output-median <tokens>', 'median response length').default('512'))
    .addOption(new Option('--output-max <tokens>', 'longest response').default('4096'))
    .addOption(new Option('--p99-over-median <x>', 'long tail: p99 / median of response lengths').default('10'))
    .addOption(new Option('--prompt-median <tokens>', 'median prompt length').default('128'))
    .addOption(new Option('--time-scale <x>', 'simulated seconds per wall second').default('1'))
    .addOption(new Option('--seed <n>', 'random seed of the engine').default('1'))
    .addOption(new Option('--heartbeat <duration>', 'heartbeat period to the manager').env('LAMINAR_HEARTBEAT').default('1s'))
    .addOption(new Option('--metrics-host <host>', 'address of /metrics').default('127.0.0.1'))
    .addOption(new Option('--metrics-port <port>', 'port of /metrics (0: any, -1: off)').default('-1'))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .action(async (opts: Record<string, string | undefined>) => {
      const logger = createLogger({ level: opts.logLevel as 'info', name: 'laminar-sim-rollout' });
      const control = parseControlOptions(controlInput(opts)!);
      if (!opts.relaySocket && opts.fixedVersion === undefined) {
        throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'give --relay-socket (weights from the local relay) or --fixed-version');
      }
      const fixed = opts.fixedVersion !== undefined ? Number(opts.fixedVersion) : null;
      if (fixed !== null && !(Number.isSafeInteger(fixed) && fixed >= 0)) {
        throw new InvalidInputError(
          ErrorCodes.INVALID_ARG,
          `--fixed-version must be a version number (an integer >= 0), got ${JSON.stringify(opts.fixedVersion)}`,
        );
      }
      const engineOptions = {
        profile: {
          kvCapacityTokens: positive('kv-capacity', opts.kvCapacity!),
          rooflineBatch: positive('roofline-batch', opts.rooflineBatch!),
          maxRunning: positive('max-running', opts.maxRunning!),
          decodeStepMs: parseDurationOption('--step-time', opts.stepTime!),
        },
        batchPrompts: positive('batch-prompts', opts.batchPrompts!),
        outputMedian: positive('output-median', opts.outputMedian!),
        outputMax: positive('output-max', opts.outputMax!),
        p99OverMedian: positive('p99-over-median', opts.p99OverMedian!, false),
        promptMedian: positive('prompt-median', opts.promptMedian!),
        timeScale: positive('time-scale', opts.timeScale!, false),
        seed: Number(opts.seed),
        ...(fixed !== null ? { weightVersion: () => fixed } : {}),
      };
      const heartbeatMs = parseDurationOption('--heartbeat', opts.heartbeat!);
      const nc = await connectControl(control, `sim-rollout ${opts.id}`);
      const redis = createPoolRedis(opts.redis!, { maxRetriesPerRequest: null, lazyConnect: false });
      redis.on('error', (err: Error) => logger.warn({ err: err.message }, 'redis'));
      const registry = createRegistry();
      const rollout = await startSimRollout({
        ...engineOptions,
        nc,
        redis,
        job: control.job,
        id: opts.id!,
        model: opts.model!,
        relaySocket: opts.relaySocket ?? null,
        ...(opts.host ? { host: opts.host } : {}),
        ...(opts.labels ? { labels: parseLabels(opts.labels) } : {}),
        heartbeatMs,
        promptPool: opts.promptPool!,
        partialPool: opts.partialPool!,
        buffer: opts.buffer!,
        replicas: parseReplicas(opts.replicas!),
        registry,
        logger,
      });
      watchEventLoop({ registry, log: logger });
      const port = Number(opts.metricsPort);
      const http =
        port >= 0
          ? await serveMetrics(registry, {
              host: opts.metricsHost!,
              port,
              status: () => ({ id: opts.id, version: rollout.client.version, owned: rollout.client.owned.size, ...rollout.engine.stats }),
            })
          : null;
      logger.info({ rollout: opts.id, job: control.job, metricsPort: http?.port ?? null }, 'sim-rollout started');
      stopOnSignals({
        logger,
        message: 'stopping (in-flight trajectories stay in the partial pool)',
        details: () => rollout.engine.stats,
        close: async () => {
          await rollout.close();
          await http?.close();
          await nc.drain().catch(() => undefined);
          redis.disconnect();
        },
      });
    });
}
