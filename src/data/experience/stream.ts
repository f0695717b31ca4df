/**
 * The experience buffer's JetStream stream: file storage, one record message per trajectory on
 * `laminar.exp.<buffer>.t.<id>` (metadata in a header, payload in the body) and, for payloads
 * larger than the server's max payload, chunk messages on `laminar.exp.<buffer>.c.<id>`
 * published before the record (claim check: a record is the commit point).
 *
 * Beside it, the buffer's completion marks (completion-marks.ts): one empty message per
 * trajectory on `laminar.expdone.<buffer>.<id>`, published when its record leaves the buffer
 * (trained on or evicted), kept for the completion horizon by the server's max_age.
 */
import type { JetStreamManager, StreamConfig } from '@nats-io/jetstream';
import { DiscardPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { DataInputError, StoreError } from '../errors.js';
import { checkName, idToken } from '../ids.js';
import { retryTransient } from '../retry.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface BufferStreamOptions {
  /** Buffer name (default 'default'); the stream is LAMINAR_EXP_<name>. */
  buffer?: string;
  /** Stream replicas: 1 on a single server, 3 on a NATS cluster (R3). Applied at creation. */
  replicas?: number;
  /**
   * Hard ceiling on stored bytes: beyond it writers get ERR_BUFFER_FULL (back-pressure), never a
   * silent drop. Keep it above the sampler's byte capacity. Default: unlimited.
   */
  maxStreamBytes?: number;
  /** Window in which the server drops re-published records by id (default 2 min). */
  duplicateWindowMs?: number;
  /**
   * How long a trajectory whose record left the buffer is still known as completed (its
   * completion mark's max_age). Default 30 min: longer than a partial log left behind by a
   * rollout killed between its record and the log's purge waits for a manager's orphan scan.
   * Applied at creation.
   */
  completionHorizonMs?: number;
}

export const DEFAULT_COMPLETION_HORIZON_MS = 30 * 60_000;

export interface BufferNames {
  buffer: string;
  stream: string;
  recordPrefix: string;
  chunkPrefix: string;
  recordFilter: string;
  /** Every subject of the buffer: records and chunks. */
  allFilter: string;
  recordSubject(id: string): string;
  chunkSubject(id: string): string;
  /** The completion marks' stream (LAMINAR_EXPDONE_<name>) and subjects. */
  doneStream: string;
  doneFilter: string;
  doneSubject(id: string): string;
}

export function bufferNames(buffer = 'default'): BufferNames {
  checkName('buffer', buffer);
  const recordPrefix = `laminar.exp.${buffer}.t`;
  const chunkPrefix = `laminar.exp.${buffer}.c`;
  // Outside `laminar.exp.<buffer>.>`: two streams cannot share a subject.
  const donePrefix = `laminar.expdone.${buffer}`;
  return {
    buffer,
    stream: `LAMINAR_EXP_${buffer}`,
    recordPrefix,
    chunkPrefix,
    recordFilter: `${recordPrefix}.*`,
    allFilter: `laminar.exp.${buffer}.>`,
    recordSubject: (id) => `${recordPrefix}.${idToken(id)}`,
    chunkSubject: (id) => `${chunkPrefix}.${idToken(id)}`,
    doneStream: `LAMINAR_EXPDONE_${buffer}`,
    doneFilter: `${donePrefix}.*`,
    doneSubject: (id) => `${donePrefix}.${idToken(id)}`,
  };
}

/** Nats-Msg-Id of a trajectory's chunk `i`: a re-published chunk is dropped inside the duplicate window. */
export function chunkMsgId(id: string, i: number): string {
  return `${id}\u0000c${i}`;
}

/**
 * Creates the buffer's stream and its completion marks' stream when missing; an existing stream
 * is used as it is (its replicas and horizon kept).
 */
export async function ensureBufferStream(jsm: JetStreamManager, options: BufferStreamOptions = {}): Promise<BufferNames> {
  const names = bufferNames(options.buffer);
  const replicas = options.replicas ?? 1;
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5)
    throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `replicas must be 1..5, got ${replicas}`);
  const config: Partial<StreamConfig> & { name: string } = {
    name: names.stream,
    subjects: [names.allFilter],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.New,
    max_bytes: options.maxStreamBytes ?? -1,
    num_replicas: replicas,
    duplicate_window: (options.duplicateWindowMs ?? 120_000) * 1_000_000,
    // Direct get: the sampler reads records by sequence without the JSON API's base64.
    allow_direct: true,
  };
  await ensureStream(jsm, config);
  await ensureStream(jsm, completionStreamConfig(names, replicas, options.completionHorizonMs ?? DEFAULT_COMPLETION_HORIZON_MS));
  return names;
}

/** The completion marks' stream: the server expires each mark after the horizon. */
export function completionStreamConfig(names: BufferNames, replicas: number, horizonMs: number): Partial<StreamConfig> & { name: string } {
  if (!Number.isFinite(horizonMs) || horizonMs < 1_000)
    throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `the completion horizon must be at least 1 s, got ${horizonMs} ms`);
  return {
    name: names.doneStream,
    subjects: [names.doneFilter],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    max_age: Math.round(horizonMs) * 1_000_000,
    // One mark per trajectory: marking it again (a record re-indexed after a sampler restart) replaces it.
    max_msgs_per_subject: 1,
    num_replicas: replicas,
    duplicate_window: Math.min(120_000, Math.round(horizonMs)) * 1_000_000,
    allow_direct: true,
  };
}

/**
 * Looks the stream up, and creates it when missing. Transport failures are retried (retry.ts):
 * a process that starts while its NATS cluster elects leaders (a whole-cluster restart) waits
 * for them instead of failing with a timeout.
 */
async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    await retryTransient(() => jsm.streams.info(config.name));
  } catch (err) {
    if (!/stream not found/i.test((err as Error).message)) throw new StoreError(`jetstream: ${(err as Error).message}`, err);
    try {
      await retryTransient(() => jsm.streams.add(config));
    } catch (err2) {
      // Another writer or sampler created it at the same moment.
      if (!/already in use|already exists/i.test((err2 as Error).message))
        throw new StoreError(`jetstream: cannot create ${config.name}: ${(err2 as Error).message}`, err2);
    }
  }
}
