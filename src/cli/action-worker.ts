/** `laminar action-worker`: one process of a kind's worker pool, running a shipped executor. */
import { createInterface } from 'node:readline';
import { Command, Option } from 'commander';
import { ActionWorker } from '../actions/worker.js';
import { EXECUTORS, executorTools } from '../actions/executors/index.js';
import { createLogger, type Logger } from '../common/logger.js';
import { exitOnUnexpectedRejection } from '../common/fatal.js';
import { InvalidInputError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { createRegistry, serveMetrics } from '../common/metrics.js';
import { parseBytes, parseDurationOption } from '../common/units.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { stopOnSignals } from './stop-on-signals.js';

type Opts = Record<string, string | undefined>;

/**
 * The supervisor's control pipe (stdin): `pause` parks the worker (no new action; `parked` is
 * answered once the running ones have ended), `resume` takes actions again (`active`). On stdout
 * the worker also says `busy` when it starts running an action with none running, and `idle`
 * when its last running one ends (reportBusy): the supervisor parks an idle worker before a busy
 * one, whose budget would stay held until its action ends. The pipe
 * closes when the supervisor exits, however it exits (a SIGKILL too): the worker then stops as
 * on SIGTERM, finishing or handing back what it holds, so no worker outlives its supervisor.
 */
function followSupervisor(worker: ActionWorker, logger: Logger): void {
  const lines = createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    const command = line.trim();
    if (command === 'pause') void worker.pause().then(() => process.stdout.write('parked\n'));
    else if (command === 'resume') {
      worker.resume();
      process.stdout.write('active\n');
    } else if (command !== '') logger.warn({ command }, 'unknown supervisor command');
  });
  lines.once('close', () => {
    logger.warn('the supervisor is gone (stdin closed): stopping');
    process.kill(process.pid, 'SIGTERM');
  });
}

/** The `busy`/`idle` lines of the supervisor's pipe. */
function reportBusy(busy: boolean): void {
  process.stdout.write(busy ? 'busy\n' : 'idle\n');
}

function int(opts: Opts, key: string, flag: string, min: number): number | undefined {
  const text = opts[key];
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${flag}: must be an integer >= ${min}, got ${JSON.stringify(text)}`);
  return n;
}

export function actionWorkerCommand(): Command {
  const opt = (flags: string, description: string, env: string): Option => new Option(flags, description).env(`LAMINAR_${env}`);
  return addControlFlags(new Command('action-worker'), true)
    .description("run one worker of an action kind's pool: it takes actions from the kind's work queue and runs them with an executor")
    .addOption(opt('--kind <name>', 'resource kind whose queue it serves (python, shell, search, lookup, ...)', 'ACTION_KIND').makeOptionMandatory())
    .addOption(
      opt('--executor <name>', `what runs the actions: ${EXECUTORS.join(', ')} (sandbox: tool python; lookup: tool lookup; noop: tool noop)`, 'ACTION_EXECUTOR')
        .choices(EXECUTORS)
        .makeOptionMandatory(),
    )
    .addOption(opt('--concurrency <n>', 'actions this worker runs at once (default 1)', 'ACTION_CONCURRENCY'))
    .addOption(opt('--pool <name>', 'action pool (streams LAMINAR_ACT_<pool>, LAMINAR_ACTRES_<pool>; default: default)', 'ACTION_POOL'))
    .addOption(opt('--capacity <n>', "the kind's concurrency cap over all its workers (the consumer's max_ack_pending; default 10000)", 'ACTION_CAPACITY'))
    .addOption(opt('--ack-wait <duration>', "how long an action's delivery lives without its worker's heartbeat (default 10s)", 'ACTION_ACK_WAIT'))
    .addOption(opt('--max-deliveries <n>', 'executions tried before an action fails (default 3)', 'ACTION_MAX_DELIVERIES'))
    .addOption(opt('--max-output <bytes>', 'output cap: longer outputs are cut with a marker (default 16KiB)', 'ACTION_MAX_OUTPUT'))
    .addOption(opt('--sandbox-cpu <seconds>', 'sandbox: CPU seconds per action (default 5)', 'SANDBOX_CPU'))
    .addOption(opt('--sandbox-memory <bytes>', 'sandbox: address space per action (default 512MiB)', 'SANDBOX_MEMORY'))
    .addOption(opt('--sandbox-wall <duration>', "sandbox: wall clock per action (default 30s; the action's timeout when shorter)", 'SANDBOX_WALL'))
    .addOption(
      new Option(
        '--supervised',
        'run under `laminar action-supervisor`: read `pause`/`resume` lines on stdin (answering `parked`/`active` on stdout; `busy`/`idle` there as its first action starts and its last ends), and stop as on SIGTERM when stdin closes (the supervisor died)',
      ),
    )
    .addOption(opt('--id <id>', 'worker id in results and `laminar actions` (default host:pid:random)', 'ACTION_WORKER_ID'))
    .addOption(new Option('--metrics-host <host>', 'address of /metrics').env('LAMINAR_METRICS_HOST').default('127.0.0.1'))
    .addOption(new Option('--metrics-port <port>', 'port of /metrics (0: any free port, -1: disabled)').env('LAMINAR_ACTION_METRICS_PORT').default('0'))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .action(async (opts: Opts) => {
      const logger = createLogger({ level: opts.logLevel as 'info', name: 'laminar-action-worker' });
      const metricsPort = int(opts, 'metricsPort', '--metrics-port', -1)!;
      const maxOutput = opts.maxOutput === undefined ? undefined : parseBytes(opts.maxOutput);
      const tools = executorTools(opts.executor!, {
        ...(opts.sandboxCpu !== undefined ? { cpuSeconds: int(opts, 'sandboxCpu', '--sandbox-cpu', 1)! } : {}),
        ...(opts.sandboxMemory !== undefined ? { memoryBytes: parseBytes(opts.sandboxMemory) } : {}),
        ...(opts.sandboxWall !== undefined ? { wallMs: parseDurationOption('--sandbox-wall', opts.sandboxWall) } : {}),
        ...(maxOutput !== undefined ? { maxOutputBytes: maxOutput } : {}),
      });
      const capacity = int(opts, 'capacity', '--capacity', 1);
      const maxDeliveries = int(opts, 'maxDeliveries', '--max-deliveries', 1);
      const ackWaitMs = opts.ackWait === undefined ? undefined : parseDurationOption('--ack-wait', opts.ackWait);
      const control = parseControlOptions(controlInput(opts)!);
      // No stack captured per request (nats.js's async traces): two requests per action make it
      // a fifth of the worker's CPU; errors still carry their message and code.
      const nc = await connectControl({ ...control, connection: { ...control.connection, noAsyncTraces: true } }, `action-worker ${opts.kind} ${process.pid}`);
      const registry = createRegistry();
      exitOnUnexpectedRejection(logger, registry);
      let worker: ActionWorker;
      try {
        worker = await ActionWorker.start({
          nc,
          kind: opts.kind!,
          tools,
          executor: opts.executor!,
          concurrency: int(opts, 'concurrency', '--concurrency', 1) ?? 1,
          ...(opts.pool !== undefined ? { pool: opts.pool } : {}),
          ...(capacity !== undefined ? { capacity } : {}),
          ...(maxDeliveries !== undefined ? { maxDeliveries } : {}),
          ...(ackWaitMs !== undefined ? { ackWaitMs } : {}),
          ...(maxOutput !== undefined ? { maxOutputBytes: maxOutput } : {}),
          // Caps given on the command line are the kind's caps from now on.
          updateConsumer: capacity !== undefined || maxDeliveries !== undefined || ackWaitMs !== undefined,
          ...(opts.id !== undefined ? { id: opts.id } : {}),
          ...(opts.supervised ? { onBusy: reportBusy } : {}),
          registry,
          logger,
        });
      } catch (err) {
        await nc.close().catch(() => undefined);
        throw err;
      }
      const http = metricsPort >= 0 ? await serveMetrics(registry, { host: opts.metricsHost!, port: metricsPort, status: () => worker.status() }) : null;
      logger.info({ ...worker.status(), pool: worker.names.pool, metricsPort: http?.port ?? null }, 'action worker ready');
      stopOnSignals({
        logger,
        close: async () => {
          await worker.stop(30_000);
          await http?.close();
          await nc.drain().catch(() => undefined);
          logger.info('action worker stopped');
        },
      });
      if (opts.supervised) followSupervisor(worker, logger);
    });
}
