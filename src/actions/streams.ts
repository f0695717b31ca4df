/**
 * Creates the action pool's streams and a kind's consumer (names.ts says why one work-queue
 * stream with a subject per kind). Whoever comes first creates them: the first client creates
 * the streams, the first worker of a kind its consumer; later ones use them as they are, except
 * that a worker given explicit caps updates its kind's consumer to them.
 */
import { AckPolicy, DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import { InvalidInputError, LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { actionNames, type ActionNames } from './names.js';

export interface ActionStreamOptions {
  /** Action pool (default 'default'): streams LAMINAR_ACT_<pool> and LAMINAR_ACTRES_<pool>. */
  pool?: string;
  /** 1 on a single server, 3 on a NATS cluster. Applied at creation. */
  replicas?: number;
  /** The idempotency window: an action id seen again within it is the same action (default 10 min). */
  duplicateWindowMs?: number;
  /** How long results are kept, for trajectories resumed elsewhere and `laminar actions` (default 30 min). */
  resultHorizonMs?: number;
  /**
   * Where results are kept (default memory: a nats-server restart loses the results not yet read,
   * and their submitters then get status 'failed' at their deadline or resubmit; file keeps them).
   */
  resultStorage?: 'memory' | 'file';
}

export const DEFAULT_DUPLICATE_WINDOW_MS = 10 * 60_000;
export const DEFAULT_RESULT_HORIZON_MS = 30 * 60_000;

export async function ensureActionStreams(jsm: JetStreamManager, options: ActionStreamOptions = {}): Promise<ActionNames> {
  const names = actionNames(options.pool);
  const replicas = options.replicas ?? 1;
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5) throw new InvalidInputError(ErrorCodes.BAD_ACTION, `replicas must be 1..5, got ${replicas}`);
  const windowMs = options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS;
  const horizonMs = options.resultHorizonMs ?? DEFAULT_RESULT_HORIZON_MS;
  if (!(windowMs >= 1000) || !(horizonMs >= windowMs))
    throw new InvalidInputError(ErrorCodes.BAD_ACTION, `the duplicate window (${windowMs} ms) must be >= 1 s and <= the result horizon (${horizonMs} ms)`);
  await ensureStream(jsm, {
    name: names.stream,
    subjects: [names.queueFilter],
    storage: StorageType.File,
    // Each action is removed once a worker acks it: the queue holds only what waits or runs.
    retention: RetentionPolicy.Workqueue,
    discard: DiscardPolicy.New,
    num_replicas: replicas,
    duplicate_window: windowMs * 1_000_000,
  });
  await ensureStream(jsm, {
    name: names.resultStream,
    subjects: [names.resultFilter],
    // Memory by default: a result is read within moments by a waiting client, and kept only for
    // trajectories resumed elsewhere; file storage would double each action's disk writes.
    storage: options.resultStorage === 'file' ? StorageType.File : StorageType.Memory,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    max_age: horizonMs * 1_000_000,
    // A result published twice (a worker that was thought dead finished after all) is one message.
    duplicate_window: windowMs * 1_000_000,
    max_msgs_per_subject: 1,
    num_replicas: replicas,
    allow_direct: true,
  });
  return names;
}

export interface KindConsumerOptions {
  /** The kind's concurrency cap across every worker: the consumer's max_ack_pending (default 10,000). */
  capacity?: number;
  /**
   * How long a delivery lives without a heartbeat from its worker (default 10 s): a worker that
   * dies or freezes loses its actions to other workers this long after its last heartbeat.
   */
  ackWaitMs?: number;
  /** Executions tried before the action fails (default 3); one more delivery reports the failure. */
  maxDeliveries?: number;
}

export const DEFAULT_KIND_CAPACITY = 10_000;
export const DEFAULT_ACK_WAIT_MS = 10_000;
export const DEFAULT_MAX_DELIVERIES = 3;

/** Creates the kind's consumer, or updates its caps when `update` (a worker given caps explicitly). */
export async function ensureKindConsumer(
  jsm: JetStreamManager,
  names: ActionNames,
  kind: string,
  options: KindConsumerOptions,
  update: boolean,
): Promise<void> {
  const capacity = options.capacity ?? DEFAULT_KIND_CAPACITY;
  const ackWaitMs = options.ackWaitMs ?? DEFAULT_ACK_WAIT_MS;
  const maxDeliveries = options.maxDeliveries ?? DEFAULT_MAX_DELIVERIES;
  for (const [what, n, min] of [
    ['capacity', capacity, 1],
    ['ackWaitMs', ackWaitMs, 100],
    ['maxDeliveries', maxDeliveries, 1],
  ] as const) {
    if (!Number.isInteger(n) || n < min) throw new InvalidInputError(ErrorCodes.BAD_ACTION, `${what} must be an integer >= ${min}, got ${n}`);
  }
  const durable = names.consumer(kind);
  const config = {
    durable_name: durable,
    filter_subject: names.queueSubject(kind),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    max_ack_pending: capacity,
    ack_wait: ackWaitMs * 1_000_000,
    // The last delivery is not executed: the worker that gets it reports 'failed' (worker.ts).
    max_deliver: maxDeliveries + 1,
    max_waiting: 4096,
  };
  const existing = await jsm.consumers.info(names.stream, durable).catch((err: unknown) => {
    if (/consumer not found/i.test((err as Error).message)) return null;
    throw new LaminarError(ErrorCodes.INTERNAL, `jetstream: ${(err as Error).message}`, { cause: err });
  });
  if (existing === null) {
    await jsm.consumers.add(names.stream, config).catch((err: unknown) => {
      // Another worker of the kind created it at the same moment.
      if (!/already in use|already exists/i.test((err as Error).message)) throw err;
    });
  } else if (update) {
    await jsm.consumers.update(names.stream, durable, { max_ack_pending: capacity, ack_wait: config.ack_wait, max_deliver: config.max_deliver });
  }
}

async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    await jsm.streams.info(config.name);
  } catch (err) {
    if (!/stream not found/i.test((err as Error).message)) throw new LaminarError(ErrorCodes.INTERNAL, `jetstream: ${(err as Error).message}`, { cause: err });
    await jsm.streams.add(config).catch((err2: unknown) => {
      if (!/already in use|already exists/i.test((err2 as Error).message))
        throw new LaminarError(ErrorCodes.INTERNAL, `jetstream: cannot create ${config.name}: ${(err2 as Error).message}`, { cause: err2 });
    });
  }
}
