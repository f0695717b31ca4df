/**
 * What `laminar actions` shows: per kind, the queue (waiting, running, caps, redeliveries), the
 * workers that heartbeat in the pool's bucket (slots, busy, done), and the completion times of
 * the most recent results in the results stream (queue wait and execution, p50/p99, by status).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import { openJetStreamManager } from '../data/jetstream-manager.js';
import { actionNames } from './names.js';
import type { ActionWorkerStatus } from './worker.js';
import { decodeResult } from './wire.js';
import { Kvm } from '@nats-io/kv';

export interface KindStatus {
  kind: string;
  waiting: number;
  running: number;
  capacity: number;
  maxDeliveries: number;
  ackWaitMs: number;
  redelivered: number;
  workers: ActionWorkerStatus[];
  /** Over the most recent results of the kind. */
  results: number;
  byStatus: Record<string, number>;
  queueMsP50: number | null;
  queueMsP99: number | null;
  execMsP50: number | null;
  execMsP99: number | null;
}

export interface ActionsStatus {
  pool: string;
  /** Results the completion times are computed over (the last `recent` of the results stream). */
  recent: number;
  kinds: KindStatus[];
}

/** Nearest-rank q-quantile of xs (not empty). */
function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(s.length * q) - 1)]!;
}

export async function readActionsStatus(nc: NatsConnection, pool = 'default', recent = 1000): Promise<ActionsStatus> {
  const names = actionNames(pool);
  const jsm = await openJetStreamManager(nc);
  const kinds = new Map<string, KindStatus>();
  const kindOf = (kind: string): KindStatus => {
    let k = kinds.get(kind);
    if (!k) {
      k = {
        kind,
        waiting: 0,
        running: 0,
        capacity: 0,
        maxDeliveries: 0,
        ackWaitMs: 0,
        redelivered: 0,
        workers: [],
        results: 0,
        byStatus: {},
        queueMsP50: null,
        queueMsP99: null,
        execMsP50: null,
        execMsP99: null,
      };
      kinds.set(kind, k);
    }
    return k;
  };
  // A pool no client or worker has used yet: nothing to show (and nothing created by looking).
  const exists = await jsm.streams.info(names.stream).then(
    () => true,
    (err: unknown) => {
      if (/stream not found/i.test((err as Error).message)) return false;
      throw err;
    },
  );
  if (!exists) return { pool, recent: 0, kinds: [] };
  for await (const c of jsm.consumers.list(names.stream)) {
    const kind = names.kindOfConsumer(c.name);
    if (kind === null) continue;
    Object.assign(kindOf(kind), {
      waiting: c.num_pending,
      running: c.num_ack_pending,
      capacity: c.config.max_ack_pending ?? 0,
      maxDeliveries: Math.max(0, (c.config.max_deliver ?? 1) - 1),
      ackWaitMs: Math.round((c.config.ack_wait ?? 0) / 1e6),
      redelivered: c.num_redelivered,
    });
  }
  // Opened, not created: a pool whose workers never started has no bucket.
  const kv = await new Kvm(nc).open(names.workersBucket).catch(() => null);
  for await (const key of kv ? await kv.keys() : []) {
    const e = await kv!.get(key);
    if (!e || e.operation !== 'PUT') continue;
    const w = JSON.parse(e.string()) as ActionWorkerStatus;
    kindOf(w.kind).workers.push(w);
  }
  const times = new Map<string, { queue: number[]; exec: number[] }>();
  const info = await jsm.streams.info(names.resultStream);
  const count = Math.min(recent, info.state.messages);
  if (count > 0) {
    const start = Math.max(info.state.first_seq, info.state.last_seq - count + 1);
    const consumer = await jetstream(nc).consumers.get(names.resultStream, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start });
    const messages = await consumer.fetch({ max_messages: count, expires: 2000 });
    let got = 0;
    for await (const m of messages) {
      got++;
      try {
        const r = decodeResult(m.data);
        const k = kindOf(r.kind);
        k.results++;
        k.byStatus[r.status] = (k.byStatus[r.status] ?? 0) + 1;
        const t = times.get(r.kind) ?? { queue: [], exec: [] };
        if (r.status !== 'failed') {
          t.queue.push(r.queueMs);
          t.exec.push(r.execMs);
        }
        times.set(r.kind, t);
      } catch {
        // not a result of this wire version: skipped
      }
      if (got >= count || m.info.pending === 0) break;
    }
  }
  for (const [kind, t] of times) {
    const k = kindOf(kind);
    if (t.queue.length === 0) continue;
    k.queueMsP50 = quantile(t.queue, 0.5);
    k.queueMsP99 = quantile(t.queue, 0.99);
    k.execMsP50 = quantile(t.exec, 0.5);
    k.execMsP99 = quantile(t.exec, 0.99);
  }
  return { pool, recent: count, kinds: [...kinds.values()].sort((a, b) => a.kind.localeCompare(b.kind)) };
}
