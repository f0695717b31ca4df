/** `laminar manager`: the rollout manager's control plane (chain scheduler, failure detection). */
import { Command, Option } from 'commander';
import { createLogger, type Logger } from '../common/logger.js';
import { exitOnUnexpectedRejection } from '../common/fatal.js';
import { watchEventLoop } from '../common/event-loop.js';
import { createRegistry, serveMetrics } from '../common/metrics.js';
import { parseDurationOption } from '../common/units.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { ExperienceWriter, PartialPool, PromptPool } from '../data/index.js';
import { createPoolRedis } from '../data/prompts/redis-address.js';
import { Manager } from '../manager/manager.js';
import { managerStatusRoute } from '../manager/status-route.js';
import { DashboardPublisher, EVENTS_SHOWN } from '../manager/dashboard/publisher.js';
import { dashboardRoutes } from '../manager/dashboard/routes.js';
import { ActionPoolWatch, actionsPanel } from '../manager/dashboard/action-pool-watch.js';
import { checkActionName } from '../actions/names.js';
import { loadDashboardAssets, type DashboardAssets } from '../manager/dashboard/assets.js';
import { DEFAULT_REPACK_LIMITS, validateRepackLimits } from '../manager/repack/planner.js';
import { REPACK_PLANNERS, type RepackPlanner } from '../manager/rollouts/repack-rounds.js';
import { InvalidInputError } from '../common/errors.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { stopOnSignals } from './stop-on-signals.js';
import { parseReplicas, replicasOption } from './replicas-flag.js';
import { ErrorCodes } from '../common/error-codes.js';

export function managerCommand(): Command {
  return addControlFlags(new Command('manager'), true)
    .description(
      'run the rollout manager: orders relays into the broadcast chain, detects failures and repairs the chain (one active per job, others stand by)',
    )
    .addOption(new Option('--id <name>', 'name of this manager (default: manager@host:pid)').env('LAMINAR_MANAGER_ID'))
    .addOption(new Option('--http-host <host>', 'address of /metrics and /status').env('LAMINAR_HTTP_HOST').default('127.0.0.1'))
    .addOption(new Option('--http-port <port>', 'port of /metrics and /status (0: any, -1: off)').env('LAMINAR_HTTP_PORT').default('9480'))
    .addOption(
      new Option('--dashboard-interval <duration>', "period of the dashboard's live updates (/events) while a page is open")
        .env('LAMINAR_DASHBOARD_INTERVAL')
        .default('1s'),
    )
    .addOption(
      new Option('--dashboard-pages <n>', 'dashboard pages served at once; the next one gets 503 and retries').env('LAMINAR_DASHBOARD_PAGES').default('32'),
    )
    .addOption(
      new Option('--lease <duration>', 'leader lease: a standby takes over this long after the leader stops renewing').env('LAMINAR_LEASE').default('5s'),
    )
    .addOption(new Option('--suspect-after <duration>', 'silence after which a member is suspected').env('LAMINAR_SUSPECT_AFTER').default('3s'))
    .addOption(new Option('--dead-after <duration>', 'silence after which a member is declared dead').env('LAMINAR_DEAD_AFTER').default('6s'))
    .addOption(new Option('--stall-timeout <duration>', 'a chain link without progress this long is repaired').env('LAMINAR_STALL_TIMEOUT').default('3s'))
    .addOption(new Option('--group-label <key>', 'relays with equal values of this label sit together in the chain').env('LAMINAR_GROUP_LABEL').default('rack'))
    .addOption(replicasOption('the control bucket, the experience buffer and the partial pool'))
    .addOption(
      new Option(
        '--redis <url>',
        'Redis of the prompt pool (rollout failover returns samples there): redis://, redis+sentinel:// or redis+cluster://, as the rollout agent',
      ).env('LAMINAR_REDIS'),
    )
    .addOption(new Option('--prompt-pool <name>', 'prompt pool name').env('LAMINAR_PROMPT_POOL').default('default'))
    .addOption(
      new Option('--partial-pool <name>', 'partial-response pool name (repack and failover move trajectories through it)')
        .env('LAMINAR_PARTIAL_POOL')
        .default('default'),
    )
    .addOption(
      new Option(
        '--buffer <name>',
        'experience buffer name (a taken-over trajectory already there is not resumed; completions and staleness are reported from it)',
      )
        .env('LAMINAR_BUFFER')
        .default('default'),
    )
    .addOption(
      new Option('--action-pool <name>', 'action pool whose queues, workers and completion times the dashboard shows (as `laminar actions`)')
        .env('LAMINAR_ACTION_POOL')
        .default('default'),
    )
    .addOption(new Option('--model <name>', 'model the rollouts generate with').env('LAMINAR_MODEL'))
    .addOption(
      new Option('--repack-interval <duration>', 'period of the repack check (0: repack off); it also runs after each new weight version')
        .env('LAMINAR_REPACK_INTERVAL')
        .default('5s'),
    )
    .addOption(
      new Option(
        '--planner <name>',
        "repack's planner: algorithm1 (the paper's: empty ramping-down rollouts into the densest that fit, then give them the newest weights) or dp (agentic jobs: Heddle's presorted DP placement by predicted remaining length, moving only trajectories that wait at tool calls; the rollout agents report predictions with --progressive-priority)",
      )
        .choices([...REPACK_PLANNERS])
        .env('LAMINAR_PLANNER')
        .default('algorithm1'),
    )
    .addOption(
      new Option(
        '--reprefill-cost <ratio>',
        "dp planner: what a move of a trajectory at a tool call costs, in decode-token times per token of its context re-prefilled at the destination: the engine's prefill time per token over its decode step's (npm run bench -- agentic --only sched prints the reference engine's). 0: moves are free",
      )
        .env('LAMINAR_REPREFILL_COST')
        .default('0'),
    )
    .addOption(new Option('--kv-max <fraction>', 'C_max: KV-cache use at which a rollout counts as full').env('LAMINAR_KV_MAX').default('0.99'))
    .addOption(
      new Option(
        '--roofline-batch <n[,model=n...]>',
        'B: the most trajectories a rollout decodes about as fast as one (decode still memory-bound); repack never fills a rollout beyond it. ' +
          "Measure it on the rollouts' engine: decode step time at batch sizes 1 to 512, B = the largest batch within 10% of the fastest step " +
          '(npm run bench -- repack-planner --decode-steps FILE). A default and per-model values, e.g. 256,qwen-7b=512,qwen-72b=64',
      )
        .env('LAMINAR_ROOFLINE_BATCH')
        .default('256'),
    )
    .addOption(
      new Option(
        '--orphan-wait <duration>',
        "how long a dead rollout's trajectories wait for a rollout of their weight version before their samples return to the prompt pool",
      )
        .env('LAMINAR_ORPHAN_WAIT')
        .default('30s'),
    )
    .addOption(
      new Option(
        '--orphan-scan <duration>',
        'backstop period of the scan for trajectories whose rollout is gone (it also runs when a rollout is declared dead and when this manager becomes leader)',
      )
        .env('LAMINAR_ORPHAN_SCAN')
        .default('60s'),
    )
    .addOption(
      new Option('--command-timeout <duration>', 'limit on a rollout carrying out a repack or failover command').env('LAMINAR_COMMAND_TIMEOUT').default('30s'),
    )
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .action(async (opts: Record<string, string | undefined>) => {
      const logger = createLogger({ level: opts.logLevel as 'info', name: 'laminar-manager' });
      const registry = createRegistry();
      // A rejection nobody handled is a bug after which the manager's state may be inconsistent:
      // exit (status 70) for the service manager to restart it; a standby or the restart takes the job back.
      exitOnUnexpectedRejection(logger, registry);
      const control = parseControlOptions(controlInput(opts)!);
      // Every duration is checked before connecting, so a bad flag is refused at once, by name.
      const durations = {
        leaseMs: parseDurationOption('--lease', opts.lease!),
        suspectAfterMs: parseDurationOption('--suspect-after', opts.suspectAfter!),
        deadAfterMs: parseDurationOption('--dead-after', opts.deadAfter!),
        stallMs: parseDurationOption('--stall-timeout', opts.stallTimeout!),
      };
      const rolloutDurations = {
        repackIntervalMs: parseDurationOption('--repack-interval', opts.repackInterval!),
        orphanWaitMs: parseDurationOption('--orphan-wait', opts.orphanWait!),
        orphanScanMs: parseDurationOption('--orphan-scan', opts.orphanScan!),
        commandTimeoutMs: parseDurationOption('--command-timeout', opts.commandTimeout!),
      };
      const reprefillCost = parseReprefillCost(opts.reprefillCost!);
      const replicas = parseReplicas(opts.replicas!);
      const dashboard = parseDashboardOptions(opts.dashboardInterval!, opts.dashboardPages!);
      const actionPoolName = checkActionName('--action-pool', opts.actionPool!);
      const nc = await connectControl(control, `manager ${opts.id ?? process.pid}`);
      const roofline = parseRooflineBatch(opts.rooflineBatch!);
      const limits = { cMax: Number(opts.kvMax), rooflineBatch: roofline.default };
      validateRepackLimits(limits);
      const redis = opts.redis ? createPoolRedis(opts.redis, { maxRetriesPerRequest: null }) : null;
      redis?.on('error', (err: Error) => logger.warn({ err: err.message }, 'redis'));
      const prompts = redis ? await PromptPool.open({ redis, name: opts.promptPool!, registry, logger }) : null;
      const writer = await ExperienceWriter.open({ nc, buffer: opts.buffer!, replicas, registry, logger });
      const partials = await PartialPool.open({ nc, pool: opts.partialPool!, replicas, writer, registry, logger });
      const manager = new Manager({
        nc,
        job: control.job,
        ...(opts.id ? { id: opts.id } : {}),
        registry,
        logger,
        ...durations,
        groupLabel: opts.groupLabel!,
        replicas,
        rollouts: {
          partials,
          prompts,
          limits,
          rooflineBatchByModel: roofline.byModel,
          planner: opts.planner as RepackPlanner,
          reprefillCost,
          ...(opts.model ? { model: opts.model } : {}),
          ...rolloutDurations,
        },
        staleness: { buffer: opts.buffer!, ...(opts.model ? { model: opts.model } : {}) },
      });
      await manager.start();
      watchEventLoop({ registry, log: logger });
      const port = Number(opts.httpPort);
      // Read only while a page is open (action-pool-watch.ts).
      const actionPool = new ActionPoolWatch({ nc, pool: actionPoolName, logger });
      const publisher = new DashboardPublisher({
        status: () => manager.status(),
        series: () => manager.series.window(),
        events: () => manager.journal.latest(EVENTS_SHOWN),
        staleness: (t) => manager.stalenessCounts(t),
        actions: (t) => (manager.isLeader ? actionsPanel(actionPool.latest(), manager.turnCounts(t)) : null),
        registry,
        ...dashboard,
        logger,
      });
      const routes = [managerStatusRoute(() => manager.status()), ...dashboardRoutes(publisher, readDashboardAssets(logger))];
      const http = port >= 0 ? await serveMetrics(registry, { host: opts.httpHost!, port, routes, logger }) : null;
      logger.info({ manager: manager.id, job: control.job, nats: control.servers, httpPort: http?.port ?? null, leader: manager.isLeader }, 'manager started');
      stopOnSignals({
        logger,
        message: 'stopping (handing the lease over)',
        close: async () => {
          // Open pages' streams first: they would hold the HTTP server's close.
          publisher.close();
          await actionPool.close();
          await manager.close();
          await partials.close();
          redis?.disconnect();
          await http?.close();
          await nc.drain().catch(() => undefined);
        },
      });
    });
}

/** The dashboard page's assets, or why they cannot be served (logged: the manager runs on without its page). */
function readDashboardAssets(logger: Logger): DashboardAssets | Error {
  try {
    return loadDashboardAssets();
  } catch (err) {
    logger.warn({ err: (err as Error).message }, 'the dashboard page cannot be served; / answers 503');
    return err as Error;
  }
}

/** `--dashboard-interval` and `--dashboard-pages`, checked. */
export function parseDashboardOptions(interval: string, pages: string): { intervalMs: number; maxPages: number } {
  const intervalMs = parseDurationOption('--dashboard-interval', interval);
  if (!Number.isSafeInteger(intervalMs) || intervalMs < 100)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--dashboard-interval: ${JSON.stringify(interval)} is not a duration of 100ms or more`);
  const maxPages = Number(pages);
  if (!Number.isSafeInteger(maxPages) || maxPages <= 0)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--dashboard-pages: ${JSON.stringify(pages)} is not a positive integer`);
  return { intervalMs, maxPages };
}

/** --reprefill-cost: a finite number >= 0 (decode-token times per re-prefilled context token). */
export function parseReprefillCost(text: string): number {
  const cost = text.trim() === '' ? Number.NaN : Number(text);
  if (!(Number.isFinite(cost) && cost >= 0))
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--reprefill-cost: ${JSON.stringify(text)} is not a number >= 0`);
  return cost;
}

/** "256" or "256,qwen-7b=512,qwen-72b=64": B for every model, and for the models named. */
export function parseRooflineBatch(text: string): { default: number; byModel: Record<string, number> } {
  let fallback = DEFAULT_REPACK_LIMITS.rooflineBatch;
  const byModel: Record<string, number> = {};
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p.length > 0)) {
    const eq = part.lastIndexOf('=');
    const value = Number(eq < 0 ? part : part.slice(eq + 1));
    if (!Number.isSafeInteger(value) || value <= 0)
      throw new InvalidInputError(ErrorCodes.REPACK_LIMITS, `--roofline-batch: ${JSON.stringify(part)} is not a positive integer (or model=integer)`);
    if (eq < 0) fallback = value;
    else byModel[part.slice(0, eq)] = value;
  }
  return { default: fallback, byModel };
}
