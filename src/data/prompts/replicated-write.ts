/**
 * A prompt-pool write that returns only once enough replicas have it. Redis replicates
 * asynchronously: the master answers a write before any replica has it, and a failover promotes a
 * replica, so a write the caller saw succeed can vanish with the old master (a claim handed out,
 * a completion counted, prompts loaded). `WAIT k timeout`, sent right after the write on the same
 * connection, blocks until k replicas acknowledged everything this connection wrote, or the
 * timeout passes; Sentinel promotes the replica with the most data, so a write one replica
 * acknowledged survives the loss of the master. Fewer acknowledgements than asked is
 * ERR_NOT_REPLICATED: the write stands on the master, and the caller decides (claim() gives its
 * claims back; the other calls are safe to retry).
 *
 * The write and the WAIT go in one pipeline: one round trip, and on Redis Cluster both reach the
 * node that owns the pool's slot (WAIT has no key; the pipeline goes where its keys are).
 */
import type { Cluster, Redis } from 'ioredis';
import { LaminarError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';
import type { Replication } from './redis-address.js';

/** A write the master applied but fewer replicas than asked acknowledged; `value` is its answer. */
export class NotReplicatedError extends LaminarError {
  constructor(
    message: string,
    readonly value: unknown,
    details: Record<string, unknown>,
  ) {
    super(ErrorCodes.NOT_REPLICATED, message, { details });
  }
}

type Command = ['evalsha' | 'eval', string, number, ...Array<string | number>] | ['hsetnx', string, string, string | number] | ['del', ...string[]];

/**
 * Runs one command, then WAIT for `replication.replicas` acknowledgements when that is > 0.
 * A Redis error of the command itself is thrown as it came (NOSCRIPT included, for the caller's
 * fallback to EVAL).
 */
export async function replicatedWrite(redis: Redis | Cluster, replication: Replication, command: Command): Promise<unknown> {
  const [name, ...args] = command;
  if (replication.replicas === 0) return (redis as Redis).call(name, ...args);
  const results = await redis
    .pipeline()
    .call(name, ...args)
    .wait(replication.replicas, replication.timeoutMs)
    .exec();
  // exec() resolves null only for a discarded MULTI: this is a plain pipeline.
  const [[err, value], [waitErr, acks]] = results as [[Error | null, unknown], [Error | null, unknown]];
  if (err) throw err;
  if (waitErr) throw waitErr;
  if (Number(acks) < replication.replicas)
    throw new NotReplicatedError(
      `the write reached the master, but ${Number(acks)} of the ${replication.replicas} replicas asked acknowledged it within ${replication.timeoutMs} ms`,
      value,
      { acknowledged: Number(acks), replicas: replication.replicas, timeoutMs: replication.timeoutMs },
    );
  return value;
}
