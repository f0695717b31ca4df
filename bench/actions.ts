/**
 * `npm run bench -- actions [--count 20000] [--window 256] [--rate 1000] [--paced-s 5] [--burst 10000]
 *   [--only throughput,paced,burst,multi-turn] [--mt-trajectories 32] [--mt-tokens 96] [--mt-concurrency 8] [--mt-rounds 3]`
 *
 * The actions service against raw JetStream, in the same run, on a real nats-server:
 *   throughput: `count` no-op actions through an ActionClient and one ActionWorker (in this
 *               process, `window` in flight) vs raw work-queue publish + consume + ack of the
 *               same number of messages of the same size (`window` publishes in flight):
 *               actions_over_raw (goal >= 0.7)
 *   overhead  : no-op actions submitted at `rate` per second for `paced-s` seconds to 2 worker
 *               processes (`laminar action-worker --executor noop`): completion time as the
 *               submitter sees it minus the executor's own time, p50 and p99 (goals 2 and 10 ms);
 *               beside them the p99 of its two legs (to the worker: the result's queueMs; back),
 *               and the submitter's own event-loop delay and longest GC pause while they ran
 *   burst     : `burst` actions at once to 4 worker processes, one SIGKILLed once a fifth of the
 *               results are in: burst_lost (never answered) and burst_duplicated (answered twice
 *               to a trajectory) must be 0; the results that reached the client twice on the wire
 *               (and were dropped there) and the redeliveries are reported beside them
 *   multi-turn: the rollout agent's generated tokens/s on a multi-turn task over a single-turn
 *               task, same reference engine, same tokens (actions-multi-turn.ts):
 *               multi_turn_tokens_over_single (goal >= 0.9); beside it the requests the agent
 *               kept at the engine, a turn boundary's parts and the CPU per token of the agent's
 *               process, the engine and nats-server (agentic-turn-trace.ts)
 * `--only` runs the sections named (default: all). Progress goes to stderr.
 * Prints a table, then one JSON line (last line of stdout).
 */
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Registry } from 'prom-client';
import { ActionClient, ActionWorker, noopHandler, type ActionResult } from '../src/actions/index.js';
import { mapLimit } from '../src/common/concurrency.js';
import { startNatsServer, spawnDaemon, type Daemon } from '../src/services/index.js';
import { percentile, positiveInt, printTable, processCpuSeconds, round } from './support.js';
import { multiTurnSection, type MultiTurnArgs, type MultiTurnResult } from './actions-multi-turn.js';

const SECTIONS = ['throughput', 'paced', 'burst', 'multi-turn'] as const;
type Section = (typeof SECTIONS)[number];

interface Args {
  count: number;
  window: number;
  rate: number;
  pacedSeconds: number;
  burst: number;
  only: Set<Section>;
  multiTurn: MultiTurnArgs;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, def: number): number => {
    const i = argv.indexOf(`--${name}`);
    return i < 0 ? def : positiveInt(argv[i + 1], `--${name}`);
  };
  const o = argv.indexOf('--only');
  const only = new Set((o < 0 ? SECTIONS.join(',') : (argv[o + 1] ?? '')).split(',').filter(Boolean) as Section[]);
  for (const s of only) if (!SECTIONS.includes(s)) throw new Error(`--only: ${s} is not a section (${SECTIONS.join(', ')})`);
  return {
    count: get('count', 20_000),
    window: get('window', 256),
    rate: get('rate', 1000),
    pacedSeconds: get('paced-s', 5),
    burst: get('burst', 10_000),
    only,
    multiTurn: {
      trajectories: get('mt-trajectories', 32),
      tokens: get('mt-tokens', 96),
      concurrency: get('mt-concurrency', 8),
      rounds: get('mt-rounds', 3),
      deadlineS: get('mt-deadline-s', 300),
    },
  };
}

const progress = (s: string): boolean => process.stderr.write(`actions bench: ${s}\n`);

const seconds = (t0: number): number => (performance.now() - t0) / 1000;

/** The size of a no-op action on the wire, for the raw messages. */
const RAW_BYTES = 160;

/** Raw JetStream: a work-queue stream, publishes with `window` in flight, one consumer acking each. */
async function rawWorkQueue(nc: NatsConnection, count: number, window: number, run = 0): Promise<number> {
  const jsm = await jetstreamManager(nc);
  const stream = `RAW_WQ_${run}`;
  await jsm.streams.add({ name: stream, subjects: [`rawwq${run}.>`], storage: 'file', retention: 'workqueue' });
  await jsm.consumers.add(stream, { durable_name: 'raw', ack_policy: AckPolicy.Explicit, max_ack_pending: 10_000 });
  const js = jetstream(nc);
  const consumer = await js.consumers.get(stream, 'raw');
  const body = new Uint8Array(RAW_BYTES).fill(7);
  const t0 = performance.now();
  let acked = 0;
  const consumed = (async () => {
    const messages = await consumer.consume({ max_messages: window });
    for await (const m of messages) {
      m.ack();
      if (++acked === count) break;
    }
    messages.stop();
  })();
  await mapLimit(
    Array.from({ length: count }, (_, i) => i),
    window,
    (i) => js.publish(`rawwq${run}.k`, body, { msgID: `raw-${i}` }),
  );
  await consumed;
  const s = seconds(t0);
  await jsm.streams.delete(stream);
  return count / s;
}

/** Actions through an ActionClient and one in-process ActionWorker, `window` in flight; results kept in memory or on file. */
async function ourThroughput(nc: NatsConnection, count: number, window: number, resultStorage: 'memory' | 'file' = 'memory', run = 0): Promise<number> {
  const pool = `tput_${resultStorage}_${run}`;
  const worker = await ActionWorker.start({ nc, pool, kind: 'noop', tools: { noop: noopHandler }, concurrency: window, resultStorage });
  const client = await ActionClient.open({ nc, pool, resultStorage });
  const t0 = performance.now();
  await mapLimit(
    Array.from({ length: count }, (_, i) => i),
    window,
    (i) => client.submit({ kind: 'noop', tool: 'noop', args: null, idempotencyKey: `t-${i}`, trajectoryId: `traj-${i % 512}`, timeoutMs: 30_000 }),
  );
  const s = seconds(t0);
  await client.close();
  await worker.stop(5000);
  return count / s;
}

/** `n` worker processes; if one fails to start, those that did are killed (none left behind). */
async function spawnWorkers(url: string, pool: string, n: number, extra: string[] = []): Promise<Daemon[]> {
  const started = await Promise.allSettled(
    Array.from({ length: n }, (_, i) =>
      spawnDaemon(
        `action-worker ${i}`,
        ['action-worker', '--nats', url, '--pool', pool, '--kind', 'noop', '--executor', 'noop', '--id', `${pool}-w${i}`, '--metrics-port', '-1', ...extra],
        'action worker ready',
      ),
    ),
  );
  const workers = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    await Promise.all(workers.map((w) => w.kill('SIGKILL')));
    throw failed.reason;
  }
  return workers;
}

interface PacedResult {
  p50: number;
  p99: number;
  achievedRate: number;
  /** p99 of the submission-to-start leg (the result's queueMs: publish, store, delivery to a worker; ms clocks). */
  queueP99: number;
  /** p99 of the rest: the result's way back (the overhead minus queueMs). */
  resultP99: number;
  /** This process's event-loop delay while the actions ran, p99 and max (ms): a late loop is late results. */
  loopDelayP99: number;
  loopDelayMax: number;
  /** This process's garbage collections while the actions ran: the longest pause, ms. */
  gcMaxMs: number;
}

/** No-op actions at `rate`/s for `secs` s to 2 worker processes: completion minus execution, ms. */
async function pacedOverhead(nc: NatsConnection, url: string, rate: number, secs: number): Promise<PacedResult> {
  const workers = await spawnWorkers(url, 'paced', 2, ['--concurrency', '64']);
  const client = await ActionClient.open({ nc, pool: 'paced' });
  try {
    // Warm-up: connections, consumers, JIT.
    await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        client.submit({ kind: 'noop', tool: 'noop', args: null, idempotencyKey: `w-${i}`, trajectoryId: 'w', timeoutMs: 30_000 }),
      ),
    );
    const total = rate * secs;
    const overheads: number[] = [];
    const queueLegs: number[] = [];
    const resultLegs: number[] = [];
    const done: Array<Promise<void>> = [];
    // Where a tail comes from: this process's loop and its collector (the workers' are theirs).
    const loop = monitorEventLoopDelay({ resolution: 1 });
    let gcMaxMs = 0;
    const gc = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) gcMaxMs = Math.max(gcMaxMs, e.duration);
    });
    gc.observe({ entryTypes: ['gc'] });
    loop.enable();
    const t0 = performance.now();
    let sent = 0;
    while (sent < total) {
      const due = Math.min(total, Math.floor((seconds(t0) * rate) | 0) + 1);
      for (; sent < due; sent++) {
        const start = performance.now();
        done.push(
          client
            .submit({ kind: 'noop', tool: 'noop', args: null, idempotencyKey: `p-${sent}`, trajectoryId: `traj-${sent % 512}`, timeoutMs: 30_000 })
            .then((r: ActionResult) => {
              const overhead = performance.now() - start - r.execMs;
              overheads.push(overhead);
              queueLegs.push(r.queueMs);
              resultLegs.push(overhead - r.queueMs);
            }),
        );
      }
      await new Promise((r) => setTimeout(r, 1));
    }
    const sendSeconds = seconds(t0);
    await Promise.all(done);
    loop.disable();
    gc.disconnect();
    return {
      p50: percentile(overheads, 0.5),
      p99: percentile(overheads, 0.99),
      achievedRate: total / sendSeconds,
      queueP99: percentile(queueLegs, 0.99),
      resultP99: percentile(resultLegs, 0.99),
      loopDelayP99: loop.percentile(99) / 1e6,
      loopDelayMax: loop.max / 1e6,
      gcMaxMs,
    };
  } finally {
    await client.close();
    await Promise.all(workers.map((w) => w.kill('SIGTERM')));
  }
}

/** `count` actions at once to 4 worker processes, one killed a fifth of the way. */
async function burst(nc: NatsConnection, url: string, count: number) {
  const workers = await spawnWorkers(url, 'burst', 4, ['--concurrency', '32', '--ack-wait', '2s']);
  const registry = new Registry();
  const client = await ActionClient.open({ nc, pool: 'burst', registry });
  const answers = new Map<string, number>();
  let killedAt = -1;
  const t0 = performance.now();
  try {
    await Promise.all(
      Array.from({ length: count }, (_, i) =>
        client
          .submit({
            kind: 'noop',
            tool: 'noop',
            args: { echo: `b-${i}`, sleepMs: 2 },
            idempotencyKey: `b-${i}`,
            trajectoryId: `traj-b-${i}`,
            timeoutMs: 30_000,
          })
          .then((r) => {
            if (r.output !== `b-${i}` || r.status !== 'ok') throw new Error(`action b-${i}: ${r.status} ${r.output}`);
            answers.set(r.actionId, (answers.get(r.actionId) ?? 0) + 1);
            if (killedAt < 0 && answers.size >= count / 5) {
              killedAt = answers.size;
              workers[0]!.child.kill('SIGKILL');
            }
          }),
      ),
    );
    const s = seconds(t0);
    const metric = async (name: string, labels: Record<string, string>): Promise<number> => {
      const data = await registry.getSingleMetric(name)!.get();
      return data.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))?.value ?? 0;
    };
    return {
      lost: count - answers.size,
      duplicated: [...answers.values()].filter((n) => n > 1).length,
      droppedOnWire: await metric('laminar_action_results_dropped_total', { reason: 'duplicate' }),
      seconds: s,
      killedAt,
    };
  } finally {
    await client.close();
    await Promise.all(workers.map((w) => w.kill('SIGTERM')));
  }
}

export async function run(argv: string[]): Promise<void> {
  const a = parseArgs(argv);
  const nats = await startNatsServer({ jetstream: true });
  // No stack captured per request (nats.js's async traces): a few microseconds each, for both sides.
  const nc = await connect({ servers: nats.url, noAsyncTraces: true });
  try {
    let raw: number | null = null;
    let ours: number | null = null;
    let oursFile: number | null = null;
    // CPU per message, this process (client and worker) and nats-server: what a loaded machine's
    // latencies hide.
    const cpu = { raw: null as null | [number, number], ours: null as null | [number, number] };
    const cpuOf = async (run: () => Promise<number>): Promise<[number, number, number]> => {
      const own = process.cpuUsage();
      const server = processCpuSeconds(nats.pid);
      const rate = await run();
      const used = process.cpuUsage(own);
      return [rate, (used.user + used.system) / a.count, ((processCpuSeconds(nats.pid) - server) * 1e6) / a.count];
    };
    if (a.only.has('throughput')) {
      // Twice each, the second time in the reverse order (the first runs of a process are slower:
      // JIT, new streams); the best of each.
      const runs = { raw: [] as [number, number, number][], ours: [] as [number, number, number][], file: [] as [number, number, number][] };
      const order: (keyof typeof runs)[] = ['raw', 'ours', 'file', 'file', 'ours', 'raw'];
      for (const [i, what] of order.entries()) {
        progress(
          `throughput ${i + 1}/${order.length}: ${what === 'raw' ? 'raw work queue' : what === 'ours' ? 'actions' : 'actions, results on file'}, ${a.count} messages`,
        );
        const run =
          what === 'raw' ? () => rawWorkQueue(nc, a.count, a.window, i) : () => ourThroughput(nc, a.count, a.window, what === 'file' ? 'file' : 'memory', i);
        runs[what].push(await cpuOf(run));
        progress(`throughput ${i + 1}/${order.length}: ${Math.round(runs[what].at(-1)![0])}/s`);
      }
      const best = (xs: [number, number, number][]): [number, number, number] => xs.reduce((m, x) => (x[0] > m[0] ? x : m));
      const [r, o, f] = [best(runs.raw), best(runs.ours), best(runs.file)];
      raw = r[0];
      ours = o[0];
      oursFile = f[0];
      cpu.raw = [r[1], r[2]];
      cpu.ours = [o[1], o[2]];
    }
    let paced: Awaited<ReturnType<typeof pacedOverhead>> | null = null;
    if (a.only.has('paced')) {
      progress(`paced: ${a.rate}/s for ${a.pacedSeconds} s to 2 worker processes`);
      paced = await pacedOverhead(nc, nats.url, a.rate, a.pacedSeconds);
    }
    let b: Awaited<ReturnType<typeof burst>> | null = null;
    if (a.only.has('burst')) {
      progress(`burst: ${a.burst} actions to 4 worker processes, one killed`);
      b = await burst(nc, nats.url, a.burst);
    }
    let mt: MultiTurnResult | null = null;
    if (a.only.has('multi-turn')) mt = await multiTurnSection(nats.url, nats.pid, a.multiTurn);
    const result = {
      bench: 'actions',
      sections: [...a.only],
      count: a.count,
      window: a.window,
      raw_workqueue_per_s: raw === null ? null : Math.round(raw),
      actions_per_s: ours === null ? null : Math.round(ours),
      actions_over_raw: raw === null || ours === null ? null : round(ours / raw),
      actions_per_s_file_results: oursFile === null ? null : Math.round(oursFile),
      file_results_over_memory: oursFile === null || ours === null ? null : round(oursFile / ours),
      raw_cpu_us_per_msg: cpu.raw && round(cpu.raw[0], 1),
      raw_nats_cpu_us_per_msg: cpu.raw && round(cpu.raw[1], 1),
      actions_cpu_us_per_action: cpu.ours && round(cpu.ours[0], 1),
      actions_nats_cpu_us_per_action: cpu.ours && round(cpu.ours[1], 1),
      paced_rate_per_s: paced ? Math.round(paced.achievedRate) : null,
      dispatch_overhead_ms_p50: paced ? round(paced.p50, 2) : null,
      dispatch_overhead_ms_p99: paced ? round(paced.p99, 2) : null,
      dispatch_queue_ms_p99: paced ? round(paced.queueP99, 2) : null,
      dispatch_result_ms_p99: paced ? round(paced.resultP99, 2) : null,
      paced_client_loop_delay_ms_p99: paced ? round(paced.loopDelayP99, 2) : null,
      paced_client_loop_delay_ms_max: paced ? round(paced.loopDelayMax, 2) : null,
      paced_client_gc_ms_max: paced ? round(paced.gcMaxMs, 2) : null,
      burst: a.burst,
      burst_workers: 4,
      burst_killed_after: b?.killedAt ?? null,
      burst_seconds: b ? round(b.seconds, 2) : null,
      burst_lost: b?.lost ?? null,
      burst_duplicated: b?.duplicated ?? null,
      burst_results_dropped_at_client: b?.droppedOnWire ?? null,
      multi_turn_tokens_over_single: mt?.multi_turn_tokens_over_single ?? null,
      ...(mt ?? {}),
    };
    const show = (v: number | null, unit = ''): string => (v === null ? 'skipped' : `${v}${unit}`);
    printTable(`actions: ${a.count} no-op actions, ${a.window} in flight; ${a.rate}/s for ${a.pacedSeconds} s; a burst of ${a.burst}`, [
      ['measure', 'value', 'goal / note'],
      ['raw work queue (publish+consume+ack)', show(result.raw_workqueue_per_s, ' /s'), 'the limit, same run'],
      ['actions (client -> worker -> result)', show(result.actions_per_s, ' /s'), `ratio ${show(result.actions_over_raw)} (goal >= 0.7)`],
      ['actions, results stream on file', show(result.actions_per_s_file_results, ' /s'), `${show(result.file_results_over_memory)} of memory results`],
      [
        'CPU per message: client+worker / nats-server',
        cpu.ours && cpu.raw ? `${result.actions_cpu_us_per_action} / ${result.actions_nats_cpu_us_per_action} µs` : 'skipped',
        cpu.raw ? `raw: ${result.raw_cpu_us_per_msg} / ${result.raw_nats_cpu_us_per_msg} µs` : '-',
      ],
      ['dispatch overhead p50', show(result.dispatch_overhead_ms_p50, ' ms'), `goal <= 2 ms at ${show(result.paced_rate_per_s)}/s`],
      ['dispatch overhead p99', show(result.dispatch_overhead_ms_p99, ' ms'), 'goal <= 10 ms'],
      [
        'p99 of its legs: to the worker / back',
        paced ? `${result.dispatch_queue_ms_p99} / ${result.dispatch_result_ms_p99} ms` : 'skipped',
        paced
          ? `submitter's loop delay p99 ${result.paced_client_loop_delay_ms_p99} ms (max ${result.paced_client_loop_delay_ms_max}), GC max ${result.paced_client_gc_ms_max} ms`
          : '-',
      ],
      ['burst lost', show(result.burst_lost), `goal 0 (${a.burst} actions, 4 workers, one SIGKILLed after ${show(result.burst_killed_after)} results)`],
      ['burst duplicated', show(result.burst_duplicated), `goal 0 (${show(result.burst_results_dropped_at_client)} second results dropped by the client)`],
      [
        'multi-turn / single-turn generated tokens/s',
        mt ? `${mt.multi_turn_tokens_over_single} (${mt.multi_turn_tokens_per_s} / ${mt.single_turn_tokens_per_s})` : 'skipped',
        mt ? `goal >= 0.9 (${mt.multi_turn_turns_per_trajectory} turns per trajectory, ${mt.multi_turn_generated_tokens_each} tokens each)` : 'goal >= 0.9',
      ],
      [
        'the same, engine without prefix cache',
        mt ? `${mt.multi_turn_no_prefix_cache_over_single} (${mt.multi_turn_no_prefix_cache_tokens_per_s} / ${mt.single_turn_tokens_per_s})` : 'skipped',
        mt ? `prefix cache hits with it: ${mt.multi_turn_prefix_cache_hit_rate} of prompt tokens` : '-',
      ],
      [
        'requests at the engine (mean): single / multi',
        mt ? `${mt.single_turn_mean_at_engine} / ${mt.multi_turn_mean_at_engine}` : 'skipped',
        mt
          ? `turn boundary ${mt.multi_turn_boundary_ms} ms: log ${mt.multi_turn_boundary_close_ms}, tool ${mt.multi_turn_boundary_tool_ms}, after ${mt.multi_turn_boundary_after_ms} (tokenize ${mt.multi_turn_tokenize_ms}; ${mt.multi_turn_tokenize_cache_hit_rate} from the cache)`
          : '-',
      ],
      [
        'CPU µs per token: agent+engine+nats',
        mt
          ? `single ${mt.single_turn_cpu_us_per_token_agent}+${mt.single_turn_cpu_us_per_token_engine}+${mt.single_turn_cpu_us_per_token_nats}, multi ${mt.multi_turn_cpu_us_per_token_agent}+${mt.multi_turn_cpu_us_per_token_engine}+${mt.multi_turn_cpu_us_per_token_nats}`
          : 'skipped',
        'on a loaded machine the ratio follows CPU per token',
      ],
    ]);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await nc.close();
    await nats.stop();
  }
}
