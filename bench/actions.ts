/**
 * `npm run bench -- actions [--count 20000] [--window 256] [--rate 1000] [--paced-s 5] [--burst 10000]`
 *
 * The actions service against raw JetStream, in the same run, on a real nats-server:
 *   throughput: `count` no-op actions through an ActionClient and one ActionWorker (in this
 *               process, `window` in flight) vs raw work-queue publish + consume + ack of the
 *               same number of messages of the same size (`window` publishes in flight):
 *               actions_over_raw (goal >= 0.7)
 *   overhead  : no-op actions submitted at `rate` per second for `paced-s` seconds to 2 worker
 *               processes (`laminar action-worker --executor noop`): completion time as the
 *               submitter sees it minus the executor's own time, p50 and p99 (goals 2 and 10 ms)
 *   burst     : `burst` actions at once to 4 worker processes, one SIGKILLed once a fifth of the
 *               results are in: burst_lost (never answered) and burst_duplicated (answered twice
 *               to a trajectory) must be 0; the results that reached the client twice on the wire
 *               (and were dropped there) and the redeliveries are reported beside them
 * multi_turn_tokens_over_single belongs to the rollout agent's bench (null here).
 * Prints a table, then one JSON line (last line of stdout).
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Registry } from 'prom-client';
import { ActionClient, ActionWorker, noopHandler, type ActionResult } from '../src/actions/index.js';
import { mapLimit } from '../src/common/concurrency.js';
import { startNatsServer, spawnDaemon, type Daemon } from '../src/services/index.js';
import { percentile, positiveInt, printTable, round } from './support.js';

interface Args {
  count: number;
  window: number;
  rate: number;
  pacedSeconds: number;
  burst: number;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, def: number): number => {
    const i = argv.indexOf(`--${name}`);
    return i < 0 ? def : positiveInt(argv[i + 1], `--${name}`);
  };
  return { count: get('count', 20_000), window: get('window', 256), rate: get('rate', 1000), pacedSeconds: get('paced-s', 5), burst: get('burst', 10_000) };
}

const seconds = (t0: number): number => (performance.now() - t0) / 1000;

/** The size of a no-op action on the wire, for the raw messages. */
const RAW_BYTES = 160;

/** Raw JetStream: a work-queue stream, publishes with `window` in flight, one consumer acking each. */
async function rawWorkQueue(nc: NatsConnection, count: number, window: number): Promise<number> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'RAW_WQ', subjects: ['rawwq.>'], storage: 'file', retention: 'workqueue' });
  await jsm.consumers.add('RAW_WQ', { durable_name: 'raw', ack_policy: AckPolicy.Explicit, max_ack_pending: 10_000 });
  const js = jetstream(nc);
  const consumer = await js.consumers.get('RAW_WQ', 'raw');
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
    (i) => js.publish('rawwq.k', body, { msgID: `raw-${i}` }),
  );
  await consumed;
  const s = seconds(t0);
  await jsm.streams.delete('RAW_WQ');
  return count / s;
}

/** Actions through an ActionClient and one in-process ActionWorker, `window` in flight. */
async function ourThroughput(nc: NatsConnection, count: number, window: number): Promise<number> {
  const worker = await ActionWorker.start({ nc, pool: 'tput', kind: 'noop', tools: { noop: noopHandler }, concurrency: window });
  const client = await ActionClient.open({ nc, pool: 'tput' });
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

/** No-op actions at `rate`/s for `secs` s to 2 worker processes: completion minus execution, ms. */
async function pacedOverhead(nc: NatsConnection, url: string, rate: number, secs: number): Promise<{ p50: number; p99: number; achievedRate: number }> {
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
    const done: Array<Promise<void>> = [];
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
              overheads.push(performance.now() - start - r.execMs);
            }),
        );
      }
      await new Promise((r) => setTimeout(r, 1));
    }
    const sendSeconds = seconds(t0);
    await Promise.all(done);
    return { p50: percentile(overheads, 0.5), p99: percentile(overheads, 0.99), achievedRate: total / sendSeconds };
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
    const raw = await rawWorkQueue(nc, a.count, a.window);
    const ours = await ourThroughput(nc, a.count, a.window);
    const paced = await pacedOverhead(nc, nats.url, a.rate, a.pacedSeconds);
    const b = await burst(nc, nats.url, a.burst);
    const result = {
      bench: 'actions',
      count: a.count,
      window: a.window,
      raw_workqueue_per_s: Math.round(raw),
      actions_per_s: Math.round(ours),
      actions_over_raw: round(ours / raw),
      paced_rate_per_s: Math.round(paced.achievedRate),
      dispatch_overhead_ms_p50: round(paced.p50, 2),
      dispatch_overhead_ms_p99: round(paced.p99, 2),
      burst: a.burst,
      burst_workers: 4,
      burst_killed_after: b.killedAt,
      burst_seconds: round(b.seconds, 2),
      burst_lost: b.lost,
      burst_duplicated: b.duplicated,
      burst_results_dropped_at_client: b.droppedOnWire,
      multi_turn_tokens_over_single: null,
      multi_turn_note: "the rollout agent's measure (engineer C's bench), not this one",
    };
    printTable(`actions: ${a.count} no-op actions, ${a.window} in flight; ${a.rate}/s for ${a.pacedSeconds} s; a burst of ${a.burst}`, [
      ['measure', 'value', 'goal / note'],
      ['raw work queue (publish+consume+ack)', `${result.raw_workqueue_per_s} /s`, 'the limit, same run'],
      ['actions (client -> worker -> result)', `${result.actions_per_s} /s`, `ratio ${result.actions_over_raw} (goal >= 0.7)`],
      ['dispatch overhead p50', `${result.dispatch_overhead_ms_p50} ms`, `goal <= 2 ms at ${result.paced_rate_per_s}/s`],
      ['dispatch overhead p99', `${result.dispatch_overhead_ms_p99} ms`, 'goal <= 10 ms'],
      ['burst lost', String(result.burst_lost), `goal 0 (${a.burst} actions, 4 workers, one SIGKILLed after ${b.killedAt} results)`],
      ['burst duplicated', String(result.burst_duplicated), `goal 0 (${result.burst_results_dropped_at_client} second results dropped by the client)`],
    ]);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await nc.close();
    await nats.stop();
  }
}
