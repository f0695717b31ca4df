/**
 * `npm run bench -- elastic [--trajectories 24] [--budget 4] [--seed 1] [--think-ms 1500]
 *   [--max-static-budget 12] [--interval 100ms] [--rate-window 10s] [--elastic-only]`
 *
 * Issue #49's elastic action figures, on a real nats-server with real `laminar action-worker`
 * processes: the same agentic step (every trajectory runs the same script of tool calls, a
 * generation time before each, so trajectories reach their calls of one kind together) served by
 *   static : a fixed number of workers per kind, the core budget split in proportion to each
 *            kind's mean demand (core-seconds of execution it asks for over the step): the best a
 *            static split can do for the step's average load, so the gain left over is what
 *            moving workers between kinds as the bursts come and go buys (an even split would be
 *            a weaker baseline whenever the kinds' demands differ);
 *   elastic: `laminar action-supervisor` with the same budget, starting and stopping the same
 *            worker processes toward the elastic scheduler's targets;
 *   unbounded: one worker per kind with a slot for every trajectory (no queue at all: the raw
 *            limit of the ACT, execution and the service's own overhead).
 * Figures: `act_gain_elastic` = static's mean action completion time (submit to result, as the
 * trajectory sees it) over elastic's at the same budget (goal >= 1.5); `resource_saving_elastic`
 * = 1 - elastic's core-seconds over those of the smallest static budget whose ACT is no worse
 * than elastic's (ARL-Tangram §6.3: the resources the baseline needs for the same ACT; goal >=
 * 0.3), and `resource_saving_interpolated`, the same against the static core-seconds read at
 * elastic's ACT between the two static budgets around it (the first rule is a step). Core-seconds
 * are each worker's cost times the time it was held (started to exited) within the step; a static
 * worker is held for the whole step.
 * Prints tables, then one JSON line (the last line of stdout). Progress goes to stderr;
 * `LAMINAR_BENCH_LOGS=<dir>` keeps the supervisor's log there.
 */
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { ActionClient } from '../src/actions/index.js';
import { seededRandom } from '../src/common/random.js';
import { parseDurationOption } from '../src/common/units.js';
import { CLI } from '../src/services/daemon-process.js';
import { startNatsServer, spawnDaemon, type Daemon } from '../src/services/index.js';
import { mean, percentile, positiveInt, printTable, round } from './support.js';

/** One resource kind of the step: how its worker runs, what it costs, how long its calls take. */
interface KindSpec {
  kind: string;
  executor: 'sandbox' | 'noop';
  tool: string;
  /** Cores one worker (one slot) holds. */
  cores: number;
  /** Execution time of one call, drawn uniformly in [min, max] ms. */
  execMs: [number, number];
  /** The tool's arguments for a call meant to take `ms`. */
  args(ms: number): unknown;
}

/**
 * A code agent's step: search calls (an API: the worker waits on the network, half a core) and
 * sandboxed Python runs (a core each). The Python programs do a little work and then wait, so
 * that the figures measure the scheduling, not how much CPU the loaded machine has left.
 */
const KINDS: KindSpec[] = [
  {
    kind: 'search',
    executor: 'noop',
    tool: 'noop',
    cores: 0.5,
    execMs: [300, 900],
    args: (ms) => ({ sleepMs: ms, echo: 'results' }),
  },
  {
    kind: 'python',
    executor: 'sandbox',
    tool: 'python',
    cores: 1,
    execMs: [600, 1800],
    args: (ms) => ({
      code: `import time\nt = time.time()\ns = sum(i * i for i in range(20000))\ntime.sleep(max(0, ${ms / 1000} - (time.time() - t)))\nprint(s % 97)\n`,
    }),
  },
];

/** The kinds of a trajectory's calls, in order: the same for every trajectory. */
const SCRIPT = ['search', 'search', 'python', 'search', 'search', 'python'];

interface Call {
  kind: string;
  thinkMs: number;
  execMs: number;
  args: unknown;
}

interface Args {
  trajectories: number;
  budget: number;
  seed: number;
  thinkMs: number;
  maxStaticBudget: number;
  intervalMs: number;
  /** The supervisor's `--rate-window`: how far back its arrival rates look. */
  rateWindowMs: number;
  /** Runs the elastic pool alone (for a look at the supervisor's log): no figures. */
  elasticOnly: boolean;
}

function parse(argv: string[]): Args {
  const { values } = parseArgs({
    args: argv,
    options: {
      trajectories: { type: 'string', default: '24' },
      budget: { type: 'string', default: '4' },
      seed: { type: 'string', default: '1' },
      'think-ms': { type: 'string', default: '1500' },
      'max-static-budget': { type: 'string', default: '12' },
      interval: { type: 'string', default: '100ms' },
      'rate-window': { type: 'string', default: '10s' },
      'elastic-only': { type: 'boolean', default: false },
    },
  });
  return {
    trajectories: positiveInt(values.trajectories, '--trajectories'),
    budget: positiveInt(values.budget, '--budget'),
    seed: positiveInt(values.seed, '--seed'),
    thinkMs: positiveInt(values['think-ms'], '--think-ms'),
    maxStaticBudget: positiveInt(values['max-static-budget'], '--max-static-budget'),
    intervalMs: parseDurationOption('--interval', values.interval),
    rateWindowMs: parseDurationOption('--rate-window', values['rate-window']),
    elasticOnly: values['elastic-only'],
  };
}

const progress = (s: string): boolean => process.stderr.write(`elastic bench: ${s}\n`);
const spec = (kind: string): KindSpec => KINDS.find((k) => k.kind === kind)!;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Every trajectory's calls, drawn once: each mode serves exactly the same step. */
function drawStep(a: Args): Call[][] {
  const rnd = seededRandom(a.seed);
  const uniform = ([lo, hi]: [number, number]): number => Math.round(lo + (hi - lo) * rnd());
  return Array.from({ length: a.trajectories }, () =>
    SCRIPT.map((kind) => {
      const execMs = uniform(spec(kind).execMs);
      // A turn's generation time: the model's tokens before the call, 0.5x to 1.5x the mean.
      return { kind, thinkMs: uniform([a.thinkMs / 2, (a.thinkMs * 3) / 2]), execMs, args: spec(kind).args(execMs) };
    }),
  );
}

/** Each kind's demand over the step, core-seconds of execution. */
function demandCoreSeconds(step: Call[][]): Map<string, number> {
  const out = new Map(KINDS.map((k) => [k.kind, 0]));
  for (const calls of step) for (const c of calls) out.set(c.kind, out.get(c.kind)! + (c.execMs / 1000) * spec(c.kind).cores);
  return out;
}

/**
 * Workers per kind for a static budget: each kind's share of the cores in proportion to its
 * demand, at least one worker each, the cores left by rounding down given one worker at a time
 * to the kind furthest below its share.
 */
export function staticSplit(demand: Map<string, number>, budget: number): Map<string, number> {
  const total = [...demand.values()].reduce((a, b) => a + b, 0);
  const share = new Map(KINDS.map((k) => [k.kind, (budget * demand.get(k.kind)!) / total]));
  const workers = new Map(KINDS.map((k) => [k.kind, Math.max(1, Math.floor(share.get(k.kind)! / k.cores))]));
  const used = (): number => KINDS.reduce((s, k) => s + workers.get(k.kind)! * k.cores, 0);
  for (;;) {
    const room = budget - used();
    const fitting = KINDS.filter((k) => k.cores <= room + 1e-9);
    if (fitting.length === 0) break;
    fitting.sort((x, y) => share.get(y.kind)! - workers.get(y.kind)! * y.cores - (share.get(x.kind)! - workers.get(x.kind)! * x.cores));
    workers.set(fitting[0]!.kind, workers.get(fitting[0]!.kind)! + 1);
  }
  return workers;
}

function workerArgv(url: string, pool: string, k: KindSpec, concurrency: number, logLevel: string): string[] {
  return [
    'action-worker',
    '--nats',
    url,
    '--pool',
    pool,
    '--kind',
    k.kind,
    '--executor',
    k.executor,
    '--concurrency',
    String(concurrency),
    '--metrics-port',
    '-1',
    '--log-level',
    logLevel,
  ];
}

interface Outcome {
  acts: { kind: string; actMs: number; execMs: number }[];
  startMs: number;
  endMs: number;
}

/** Runs the step: every trajectory's calls in order, each after its generation time. */
async function runStep(nc: NatsConnection, pool: string, step: Call[][], tag: string): Promise<Outcome> {
  const client = await ActionClient.open({ nc, pool, registry: new Registry() });
  const acts: Outcome['acts'] = [];
  const startMs = Date.now();
  try {
    await Promise.all(
      step.map(async (calls, i) => {
        for (const [t, c] of calls.entries()) {
          await sleep(c.thinkMs);
          const t0 = performance.now();
          const r = await client.submit({
            kind: c.kind,
            tool: spec(c.kind).tool,
            args: c.args,
            idempotencyKey: `${tag}-${i}-${t}`,
            trajectoryId: `traj-${i}`,
            timeoutMs: 60_000,
          });
          if (r.status !== 'ok') throw new Error(`${tag}: ${c.kind} call ${i}/${t} ended ${r.status}: ${r.output}`);
          acts.push({ kind: c.kind, actMs: performance.now() - t0, execMs: r.execMs });
        }
      }),
    );
  } finally {
    await client.close();
  }
  return { acts, startMs, endMs: Date.now() };
}

interface ModeResult {
  mode: string;
  budget: number;
  workers: string;
  actMs: number;
  /** The tail: a call that waited for a worker's whole ack wait (an action lost in flight) shows here. */
  actP99Ms: number;
  actMaxMs: number;
  actByKind: Map<string, number>;
  execMs: number;
  coreSeconds: number;
  stepSeconds: number;
  peakCores: number;
}

function summarise(mode: string, budget: number, workers: string, o: Outcome, coreSeconds: number, peakCores: number): ModeResult {
  const actByKind = new Map(KINDS.map((k) => [k.kind, mean(o.acts.filter((a) => a.kind === k.kind).map((a) => a.actMs))]));
  const acts = o.acts.map((a) => a.actMs);
  return {
    mode,
    budget,
    workers,
    actMs: mean(acts),
    actP99Ms: percentile(acts, 0.99),
    actMaxMs: Math.max(...acts),
    actByKind,
    execMs: mean(o.acts.map((a) => a.execMs)),
    coreSeconds,
    stepSeconds: (o.endMs - o.startMs) / 1000,
    peakCores,
  };
}

/** Fixed workers per kind, started (and ready) before the step begins. */
async function runStatic(
  url: string,
  nc: NatsConnection,
  step: Call[][],
  mode: string,
  workers: Map<string, number>,
  concurrency: number,
): Promise<ModeResult> {
  const pool = mode.replace(/[^A-Za-z0-9_-]/g, '_');
  const daemons: Daemon[] = [];
  try {
    for (const k of KINDS) {
      for (let i = 0; i < workers.get(k.kind)!; i++) {
        daemons.push(
          await spawnDaemon(`${k.kind} worker`, workerArgv(url, pool, k, concurrency, 'info'), 'action worker ready', [], process.env, undefined, 120_000),
        );
      }
    }
    const o = await runStep(nc, pool, step, pool);
    const cores = KINDS.reduce((s, k) => s + workers.get(k.kind)! * k.cores, 0);
    const split = KINDS.map((k) => `${k.kind} ${workers.get(k.kind)!}${concurrency > 1 ? `x${concurrency}` : ''}`).join(', ');
    return summarise(mode, cores, split, o, (cores * (o.endMs - o.startMs)) / 1000, cores);
  } finally {
    await Promise.all(daemons.map((d) => d.kill('SIGTERM')));
  }
}

interface Held {
  kind: string;
  from: number;
  to: number | null;
}

/**
 * The spans in which the supervisor's workers held their cores, from its log (pino's `time` is
 * epoch ms, as Date.now()): from started or resumed to parked or exited. A parked worker's
 * process lives on but runs nothing and holds none of the budget.
 */
function heldWorkers(logs: string[]): Held[] {
  const open = new Map<number, Held>();
  const spans: Held[] = [];
  for (const line of logs) {
    let e: Record<string, unknown>;
    try {
      e = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue;
    }
    const pid = e.pid as number;
    if (e.msg === 'action worker started' || e.msg === 'action worker resumed') {
      const span = { kind: e.kind as string, from: e.time as number, to: null };
      open.set(pid, span);
      spans.push(span);
    }
    if ((e.msg === 'action worker parked' || e.msg === 'action worker exited') && open.has(pid)) {
      open.get(pid)!.to = e.time as number;
      open.delete(pid);
    }
  }
  return spans;
}

/** Core-seconds the workers held within [start, end], and the most cores held at once. */
function coreUse(held: Held[], start: number, end: number): { coreSeconds: number; peak: number } {
  let coreSeconds = 0;
  const events: [number, number][] = [];
  for (const h of held) {
    const c = spec(h.kind).cores;
    const to = h.to ?? end;
    coreSeconds += (c * Math.max(0, Math.min(to, end) - Math.max(h.from, start))) / 1000;
    events.push([h.from, c], [to, -c]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let peak = 0;
  for (const [, d] of events) peak = Math.max(peak, (now += d));
  return { coreSeconds, peak };
}

/**
 * Starts the supervisor's processes before the step, as the step before it would in a training
 * run (a parked worker is kept for `--park-for`, 60 s, far longer than the gap between steps),
 * just as the static workers are started before the step: a burst of each kind, one action for
 * each worker the budget allows it, then every worker parked again.
 */
async function warmUp(nc: NatsConnection, pool: string, budget: number, holding: () => number): Promise<void> {
  const client = await ActionClient.open({ nc, pool, registry: new Registry() });
  try {
    for (const k of KINDS) {
      const n = Math.floor(budget / k.cores);
      await Promise.all(
        Array.from({ length: n }, (_, i) =>
          client.submit({
            kind: k.kind,
            tool: k.tool,
            args: k.args(1000),
            idempotencyKey: `warm-${k.kind}-${i}`,
            trajectoryId: `warm-${i}`,
            timeoutMs: 120_000,
          }),
        ),
      );
    }
  } finally {
    await client.close();
  }
  for (let waited = 0; holding() > 0; waited += 100) {
    if (waited > 120_000) throw new Error('the supervisor did not park its workers after the warm-up');
    await sleep(100);
  }
}

async function runElastic(url: string, nc: NatsConnection, step: Call[][], a: Args): Promise<ModeResult> {
  const { budget, intervalMs, rateWindowMs } = a;
  const pool = 'elastic';
  const argv = [
    'action-supervisor',
    '--nats',
    url,
    '--pool',
    pool,
    '--budget-cores',
    String(budget),
    '--interval',
    `${intervalMs}ms`,
    '--rate-window',
    `${rateWindowMs}ms`,
    '--metrics-port',
    '-1',
    ...KINDS.flatMap((k) => [
      '--command',
      `${k.kind}=${[process.execPath, CLI, ...workerArgv(url, pool, k, 1, 'warn'), '--supervised'].join(' ')}`,
      '--cost',
      `${k.kind}=${k.cores}`,
    ]),
    '--default-exec',
    `${Math.round(mean(spec('python').execMs))}ms`,
  ];
  const supervisor = await spawnDaemon('action-supervisor', argv, 'action supervisor ready');
  // Every line from here on (the daemon's own `logs` keep only the most recent ones).
  const logs = [...supervisor.logs];
  let partial = '';
  supervisor.child.stderr!.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop()!;
    logs.push(...lines);
  });
  try {
    await warmUp(nc, pool, budget, () => heldWorkers(logs).filter((h) => h.to === null).length);
    const o = await runStep(nc, pool, step, pool);
    supervisor.child.kill('SIGTERM');
    await supervisor.exited;
    if (process.env.LAMINAR_BENCH_LOGS) writeFileSync(join(process.env.LAMINAR_BENCH_LOGS, 'elastic-supervisor.log'), `${logs.join('\n')}\n`);
    const use = coreUse(heldWorkers(logs), o.startMs, o.endMs);
    const most = new Map<string, number>();
    for (const line of logs) {
      try {
        const e = JSON.parse(line) as { msg?: string; targets?: Record<string, number> };
        if (e.msg === 'elastic targets') for (const [k, n] of Object.entries(e.targets!)) most.set(k, Math.max(most.get(k) ?? 0, n));
      } catch {
        // a worker's own line
      }
    }
    const workers = `up to ${KINDS.map((k) => `${k.kind} ${most.get(k.kind) ?? 0}`).join(', ')}`;
    return summarise('elastic', budget, workers, o, use.coreSeconds, use.peak);
  } finally {
    await supervisor.kill('SIGKILL');
  }
}

export async function run(argv: string[]): Promise<void> {
  const a = parse(argv);
  const step = drawStep(a);
  const demand = demandCoreSeconds(step);
  const load = loadavg()[0]!;
  const nats = await startNatsServer({ jetstream: true });
  const nc = await connect({ servers: nats.url });
  const results: ModeResult[] = [];
  try {
    progress(`${a.trajectories} trajectories x ${SCRIPT.length} calls, budget ${a.budget} cores, load average ${round(load, 1)}`);
    const elastic = await runElastic(nats.url, nc, step, a);
    results.push(elastic);
    progress(
      `elastic (${elastic.workers}): ACT ${round(elastic.actMs, 0)} ms (p99 ${round(elastic.actP99Ms, 0)}, max ${round(elastic.actMaxMs, 0)}), ${round(elastic.coreSeconds, 1)} core-s`,
    );
    if (a.elasticOnly) return;
    const staticAt = async (budget: number): Promise<ModeResult> => {
      const r = await runStatic(nats.url, nc, step, `static-${budget}`, staticSplit(demand, budget), 1);
      results.push(r);
      progress(`static ${budget} cores (${r.workers}): ACT ${round(r.actMs, 0)} ms`);
      return r;
    };
    const same = await staticAt(a.budget);
    let matching: ModeResult | null = same.actMs <= elastic.actMs ? same : null;
    for (let b = a.budget + 1; matching === null && b <= a.maxStaticBudget; b++) {
      const r = await staticAt(b);
      if (r.actMs <= elastic.actMs) matching = r;
    }
    const statics = results.filter((r) => r.mode.startsWith('static'));
    const slower = matching === null ? undefined : statics[statics.indexOf(matching) - 1];
    const interpolated =
      matching === null || slower === undefined
        ? null
        : slower.coreSeconds + ((matching.coreSeconds - slower.coreSeconds) * (slower.actMs - elastic.actMs)) / (slower.actMs - matching.actMs);
    const unbounded = await runStatic(nats.url, nc, step, 'unbounded', new Map(KINDS.map((k) => [k.kind, 1])), a.trajectories);
    results.push(unbounded);
    progress(`unbounded: ACT ${round(unbounded.actMs, 0)} ms`);

    const kindCols = KINDS.map((k) => `ACT ${k.kind} ms`);
    printTable(
      `elastic vs static action workers: ${a.trajectories} trajectories x [${SCRIPT.join(', ')}], generation ${a.thinkMs / 2}-${(a.thinkMs * 3) / 2} ms before each call; load average ${round(load, 1)} on ${cpus().length} cores`,
      [
        ['mode', 'budget cores', 'workers', 'mean ACT ms', 'p99 ACT ms', 'max ACT ms', ...kindCols, 'mean exec ms', 'step s', 'core-s held', 'peak cores'],
        ...results.map((r) => [
          r.mode,
          String(round(r.budget, 2)),
          r.workers,
          String(round(r.actMs, 0)),
          String(round(r.actP99Ms, 0)),
          String(round(r.actMaxMs, 0)),
          ...KINDS.map((k) => String(round(r.actByKind.get(k.kind)!, 0))),
          String(round(r.execMs, 0)),
          String(round(r.stepSeconds, 1)),
          String(round(r.coreSeconds, 1)),
          String(round(r.peakCores, 2)),
        ]),
      ],
    );
    const line = {
      bench: 'elastic',
      trajectories: a.trajectories,
      script: SCRIPT,
      budget_cores: a.budget,
      think_ms: a.thinkMs,
      interval_ms: a.intervalMs,
      rate_window_ms: a.rateWindowMs,
      seed: a.seed,
      load_average: round(load, 2),
      demand_core_s: Object.fromEntries(demand),
      static_split: same.workers,
      act_static_ms: round(same.actMs, 1),
      act_elastic_ms: round(elastic.actMs, 1),
      act_unbounded_ms: round(unbounded.actMs, 1),
      act_p99_static_ms: round(same.actP99Ms, 1),
      act_p99_elastic_ms: round(elastic.actP99Ms, 1),
      act_max_elastic_ms: round(elastic.actMaxMs, 1),
      exec_mean_ms: round(unbounded.execMs, 1),
      act_gain_elastic: round(same.actMs / elastic.actMs, 3),
      act_by_kind_static_ms: Object.fromEntries([...same.actByKind].map(([k, v]) => [k, round(v, 1)])),
      act_by_kind_elastic_ms: Object.fromEntries([...elastic.actByKind].map(([k, v]) => [k, round(v, 1)])),
      elastic_peak_cores: round(elastic.peakCores, 2),
      elastic_core_s: round(elastic.coreSeconds, 1),
      static_budget_equal_act: matching?.budget ?? null,
      static_core_s_equal_act: matching ? round(matching.coreSeconds, 1) : null,
      // Without a matching static budget up to --max-static-budget, the saving is at least this.
      resource_saving_elastic: round(1 - elastic.coreSeconds / (matching ?? statics.at(-1)!).coreSeconds, 3),
      resource_saving_is_lower_bound: matching === null,
      budget_saving_equal_act: matching ? round(1 - a.budget / matching.budget, 3) : null,
      // The rule above is a step: an elastic ACT a few ms either side of a static budget's moves
      // the saving by a whole budget's core-seconds. Read at elastic's ACT on the line between
      // the static budget just slower and the one that matched, it does not jump.
      resource_saving_interpolated: interpolated === null ? null : round(1 - elastic.coreSeconds / interpolated, 3),
    };
    process.stdout.write(`${JSON.stringify(line)}\n`);
  } finally {
    await nc.close();
    await nats.stop();
  }
}
