/**
 * `laminar action-supervisor`: elastic action workers on this host. It parses the budget, the
 * per-kind worker costs and commands once, then runs the ActionSupervisor loop
 * (src/actions/elastic/supervisor.ts) until SIGTERM, which stops every worker it started.
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { Command, Option } from 'commander';
import { EXECUTORS } from '../actions/executors/index.js';
import { LocalWorkers } from '../actions/elastic/local-workers.js';
import { checkResources, type Resources } from '../actions/elastic/resources.js';
import { ActionSupervisor } from '../actions/elastic/supervisor.js';
import { createLogger } from '../common/logger.js';
import { exitOnUnexpectedRejection } from '../common/fatal.js';
import { InvalidInputError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { createRegistry, serveMetrics } from '../common/metrics.js';
import { parseBytes, parseDurationOption } from '../common/units.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { CLI } from '../services/daemon-process.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { stopOnSignals } from './stop-on-signals.js';

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

const badInput = (field: string, message: string): InvalidInputError => new InvalidInputError(ErrorCodes.BAD_ELASTIC_INPUT, `${field}: ${message}`, { field });

/** `kind=value` pairs of a repeatable flag. */
function pairs(flag: string, values: string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const v of values) {
    const eq = v.indexOf('=');
    if (eq <= 0) throw badInput(flag, `expected kind=value, got ${JSON.stringify(v)}`);
    out.set(v.slice(0, eq), v.slice(eq + 1));
  }
  return out;
}

/** `--cost kind=CORES[,MEMORY[,API_CALLS]]` (memory in bytes with a unit, as 512MiB). */
function parseCost(flag: string, text: string): Resources {
  const [cores, memory, api] = text.split(',');
  const cost = { cores: Number(cores), memoryMiB: memory ? parseBytes(memory) / 2 ** 20 : 0, apiCalls: api ? Number(api) : 0 };
  checkResources(cost, flag, false);
  return cost;
}

function readCostsFile(path: string): Record<string, Resources> {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new InvalidInputError(ErrorCodes.BAD_ELASTIC_INPUT, `--costs-file ${path}: ${(err as Error).message}`, { field: '--costs-file' });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw badInput('--costs-file', 'expected {"kind": {"cores": n, "memoryMiB": n, "apiCalls": n}}');
  const out: Record<string, Resources> = {};
  for (const [kind, c] of Object.entries(json as Record<string, Partial<Resources>>)) {
    out[kind] = { cores: c.cores ?? 1, memoryMiB: c.memoryMiB ?? 0, apiCalls: c.apiCalls ?? 0 };
    checkResources(out[kind], `--costs-file.${kind}`, false);
  }
  return out;
}

function budgetNumber(flag: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!(n >= 0)) throw badInput(flag, `must be a number >= 0, got ${JSON.stringify(text)}`);
  return n;
}

type Opts = Record<string, string | string[] | undefined>;

export function actionSupervisorCommand(): Command {
  return addControlFlags(new Command('action-supervisor'), true)
    .description("start and stop this host's action workers toward the elastic scheduler's per-kind targets, within a resource budget")
    .addOption(
      new Option('--worker <kind=executor>', `a kind to manage, run by \`laminar action-worker --executor\` (${EXECUTORS.join(', ')}); repeatable`).argParser(
        collect,
      ),
    )
    .addOption(
      new Option(
        '--command <kind=argv>',
        "a kind to manage, run by this command line (split on spaces; the pool's NATS flags are not added; it must follow the supervisor's stdin as `laminar action-worker --supervised` does); repeatable",
      ).argParser(collect),
    )
    .addOption(
      new Option(
        '--cost <kind=cores[,memory[,apiCalls]]>',
        'what one worker of the kind costs (default 1 core, no memory, no API calls); repeatable',
      ).argParser(collect),
    )
    .addOption(new Option('--costs-file <path>', 'JSON {"kind": {"cores": n, "memoryMiB": n, "apiCalls": n}}; --cost overrides it'))
    .addOption(new Option('--budget-cores <n>', "cores all workers may hold together (default: this host's cores)"))
    .addOption(new Option('--budget-memory <bytes>', 'memory all workers may hold together, as 8GiB (default unlimited)'))
    .addOption(new Option('--budget-api-calls <n>', 'concurrent API calls all workers may hold together (default unlimited)'))
    .addOption(new Option('--pool <name>', 'action pool (default: default)').env('LAMINAR_ACTION_POOL').default('default'))
    .addOption(new Option('--interval <duration>', 'how often it re-plans (default 2s); arrivals are counted over this horizon').default('2s'))
    .addOption(new Option('--rate-window <duration>', "how far back each kind's arrival rate looks; shorter follows bursts sooner").default('10s'))
    .addOption(
      new Option('--park-for <duration>', "how long a scaled-down (parked) worker's process is kept for the kind's next burst before it is stopped").default(
        '60s',
      ),
    )
    .addOption(new Option('--default-exec <duration>', 'execution time assumed for a kind with no recent result (default 1s)').default('1s'))
    .addOption(new Option('--metrics-host <host>', 'address of /metrics').env('LAMINAR_METRICS_HOST').default('127.0.0.1'))
    .addOption(new Option('--metrics-port <port>', 'port of /metrics (0: any free port, -1: disabled)').default('0'))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .action(async (opts: Opts) => {
      const logger = createLogger({ level: opts.logLevel as 'info', name: 'laminar-action-supervisor' });
      const pool = opts.pool as string;
      const executors = pairs('--worker', (opts.worker as string[] | undefined) ?? []);
      const commands = pairs('--command', (opts.command as string[] | undefined) ?? []);
      for (const [kind, executor] of executors) {
        if (!(EXECUTORS as readonly string[]).includes(executor)) throw badInput('--worker', `kind ${kind}: unknown executor ${JSON.stringify(executor)}`);
      }
      const kinds = [...new Set([...executors.keys(), ...commands.keys()])];
      if (kinds.length === 0) throw badInput('--worker', 'name at least one kind with --worker or --command');
      const fileCosts = opts.costsFile === undefined ? {} : readCostsFile(opts.costsFile as string);
      const flagCosts = pairs('--cost', (opts.cost as string[] | undefined) ?? []);
      const costs: Record<string, Resources> = {};
      for (const kind of kinds) {
        const flag = flagCosts.get(kind);
        costs[kind] = flag !== undefined ? parseCost(`--cost.${kind}`, flag) : (fileCosts[kind] ?? { cores: 1, memoryMiB: 0, apiCalls: 0 });
      }
      const budget: Resources = {
        cores: budgetNumber('--budget-cores', opts.budgetCores as string | undefined, cpus().length),
        memoryMiB: opts.budgetMemory === undefined ? Infinity : parseBytes(opts.budgetMemory as string) / 2 ** 20,
        apiCalls: budgetNumber('--budget-api-calls', opts.budgetApiCalls as string | undefined, Infinity),
      };
      const intervalMs = parseDurationOption('--interval', opts.interval as string);
      const defaultExecMs = parseDurationOption('--default-exec', opts.defaultExec as string);
      const rateWindowMs = parseDurationOption('--rate-window', opts.rateWindow as string);
      const metricsPort = Number(opts.metricsPort);
      const control = parseControlOptions(controlInput(opts)!);
      const nc = await connectControl(control, `action-supervisor ${process.pid}`);
      const registry = createRegistry();
      exitOnUnexpectedRejection(logger, registry);
      const natsFlags = opts.nats === undefined ? [] : ['--nats', opts.nats as string];
      const workers = new LocalWorkers(
        (kind) =>
          commands.get(kind)?.split(' ').filter(Boolean) ?? [
            process.execPath,
            CLI,
            'action-worker',
            ...natsFlags,
            '--pool',
            pool,
            '--kind',
            kind,
            '--executor',
            executors.get(kind)!,
            '--supervised',
            '--metrics-port',
            '-1',
            '--log-level',
            'warn',
          ],
        logger,
        parseDurationOption('--park-for', opts.parkFor as string),
      );
      const supervisor = new ActionSupervisor({ nc, pool, budget, costs, defaultExecMs, intervalMs, rateWindowMs, workers, registry, logger });
      const http =
        metricsPort >= 0
          ? await serveMetrics(registry, { host: opts.metricsHost as string, port: metricsPort, status: () => supervisor.lastPlan ?? {} })
          : null;
      supervisor.start();
      logger.info({ pool, kinds, budget, costs, metricsPort: http?.port ?? null }, 'action supervisor ready');
      stopOnSignals({
        logger,
        close: async () => {
          await supervisor.stop();
          await http?.close();
          await nc.drain().catch(() => undefined);
          logger.info('action supervisor stopped');
        },
      });
    });
}
