/** The partial-response pool's stream: one log subject per in-flight trajectory, file storage. */
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { DataInputError, StoreError } from '../errors.js';
import { checkName, idToken } from '../ids.js';
import { retryTransient } from '../retry.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface PartialStreamOptions {
  /** Pool name (default 'default'); the stream is LAMINAR_PARTIAL_<name>. */
  pool?: string;
  /** 1 on a single server, 3 on a NATS cluster (R3). Applied at creation. */
  replicas?: number;
  /** Hard ceiling on stored bytes (appends then fail with ERR_BUFFER_FULL). Default unlimited. */
  maxStreamBytes?: number;
}

export interface PartialNames {
  pool: string;
  stream: string;
  filter: string;
  subject(trajectoryId: string): string;
}

export function partialNames(pool = 'default'): PartialNames {
  checkName('partial pool', pool);
  return {
    pool,
    stream: `LAMINAR_PARTIAL_${pool}`,
    filter: `laminar.partial.${pool}.d.*`,
    subject: (id) => `laminar.partial.${pool}.d.${idToken(id)}`,
  };
}

export async function ensurePartialStream(jsm: JetStreamManager, options: PartialStreamOptions): Promise<PartialNames> {
  const names = partialNames(options.pool);
  const replicas = options.replicas ?? 1;
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5)
    throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `replicas must be 1..5, got ${replicas}`);
  try {
    // Retried through transport failures, as the buffer's stream (experience/stream.ts).
    await retryTransient(() => jsm.streams.info(names.stream));
  } catch (err) {
    if (!/stream not found/i.test((err as Error).message)) throw new StoreError(`jetstream: ${(err as Error).message}`, err);
    await retryTransient(() =>
      jsm.streams.add({
        name: names.stream,
        subjects: [`laminar.partial.${names.pool}.>`],
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        discard: DiscardPolicy.New,
        max_bytes: options.maxStreamBytes ?? -1,
        num_replicas: replicas,
        allow_direct: true,
      }),
    ).catch((err2: unknown) => {
      if (!/already in use|already exists/i.test((err2 as Error).message)) throw new StoreError(`jetstream: ${(err2 as Error).message}`, err2);
    });
  }
  return names;
}
