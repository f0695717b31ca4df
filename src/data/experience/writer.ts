/**
 * Writer of completed trajectories into the experience buffer. A rollout calls write() once
 * per trajectory; it is validated (typed, counted rejections), then stored as one record
 * message, or as chunks + a record when the payload is larger than the server's max payload.
 *
 * Duplicates: the record is published with the trajectory id as Nats-Msg-Id (the server drops
 * a repeat within the duplicate window) and with "expected last sequence on this subject = 0"
 * (the subject is per id, so a second record for an id stored in the buffer is refused at any
 * time). Both make write() idempotent, so it retries freely through a server restart. A retried
 * attempt refused because the attempt before it was stored (its acknowledgement was lost) is
 * told apart from a second write of the id by the stored record's metadata: only the latter is
 * a `duplicate`.
 * Once the record has left the buffer (trained on, evicted), its completion mark
 * (completion-marks.ts) still answers has() for the completion horizon.
 * Both reads go to the stream's leader (leader-read.ts): a replica that lags answers "not
 * written" for a record the leader holds, and the sample would be generated again.
 */
import { isDeepStrictEqual } from 'node:util';
import type { NatsConnection } from '@nats-io/transport-node';
import { headers } from '@nats-io/transport-node';
import { jetstream, type JetStreamClient, type JetStreamManager, JetStreamApiError, type PubAck } from '@nats-io/jetstream';
import { openJetStreamManager } from '../jetstream-manager.js';
import type { Registry } from 'prom-client';
import { createRegistry } from '../../common/metrics.js';
import { silentLogger, type Logger } from '../../common/logger.js';
import { DataCapacityError, DataInputError, StoreError } from '../errors.js';
import { counter } from '../../common/metric-factory.js';
import { RejectionCounter } from '../metrics.js';
import { checkPayloadSize, validateTrajectory, type Trajectory } from '../codec/trajectory.js';
import { chunkLimit, encodePayload, splitPayload } from '../codec/payload.js';
import { META_HEADER, decodeMeta, encodeMeta, metaOf, type RecordMeta } from '../codec/record-meta.js';
import { DEFAULT_RETRY_FOR_MS, retryTransient } from '../retry.js';
import { chunkMsgId, ensureBufferStream, type BufferNames, type BufferStreamOptions } from './stream.js';
import { CompletionMarks } from './completion-marks.js';
import { readFromLeader } from '../leader-read.js';
import { ErrorCodes } from '../../common/error-codes.js';

/** Where a writer checks group ids (the prompt pool implements it). */
export interface GroupRegistry {
  /** n of the group, or undefined when no such group was ever issued. */
  groupSize(groupId: string): Promise<number | undefined>;
}

export interface WriterOptions extends BufferStreamOptions {
  nc: NatsConnection;
  /** Largest payload (tokens + logprobs bytes) accepted. Default 64 MiB. */
  maxTrajectoryBytes?: number;
  /** Newest weight version that exists (trajectories from later versions are rejected). */
  maxWeightVersion?: () => number | undefined;
  /** When given, group ids must be known to it and group sizes must match. */
  groups?: GroupRegistry;
  /** How long write() keeps retrying through a JetStream outage. Default 30 s. */
  retryForMs?: number;
  registry?: Registry;
  logger?: Logger;
}

export interface WriteResult {
  seq: number;
  /** The buffer already held this trajectory id; nothing was added. */
  duplicate: boolean;
  chunks: number;
}

const GROUP_CACHE = 10_000;
const WRONG_LAST_SEQUENCE = 10071;
/**
 * JetStream's API error codes (`err_code`) for a write the buffer has no room for, as nats-server
 * 2.15.1 answers them: 10077, the stream's store refused it at one of the stream's own limits with
 * discard=new ("maximum bytes exceeded", "maximum messages exceeded", "maximum messages per subject
 * exceeded"); 10023, the server's JetStream storage is used up ("insufficient resources"); 10002,
 * the account's JetStream limits are ("resource limits exceeded for account"). The texts are for
 * people and may change; the codes are the server's API (python/.../experience/writer.py: same).
 */
export const BUFFER_FULL_API_CODES: ReadonlySet<number> = new Set([10077, 10023, 10002]);

export class ExperienceWriter {
  private readonly rejections: RejectionCounter;
  private readonly m;
  private readonly maxBytes: number;
  private readonly groupCache = new Map<string, number>();
  private readonly logger: Logger;
  private readonly marks: CompletionMarks;

  private constructor(
    private readonly options: WriterOptions,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    readonly names: BufferNames,
    registry: Registry,
  ) {
    this.rejections = new RejectionCounter(registry, 'writer');
    this.maxBytes = options.maxTrajectoryBytes ?? 64 * 1024 * 1024;
    this.logger = (options.logger ?? silentLogger).child({ component: 'experience-writer', buffer: names.buffer });
    this.marks = new CompletionMarks(js, jsm, names);
    this.m = {
      writes: counter(registry, {
        name: 'laminar_buffer_writes_total',
        help: 'Trajectories written to the experience buffer, by result (ok, duplicate)',
        labelNames: ['buffer', 'result'],
      }),
      bytes: counter(registry, { name: 'laminar_buffer_write_bytes_total', help: 'Payload bytes written to the experience buffer', labelNames: ['buffer'] }),
      chunked: counter(registry, {
        name: 'laminar_buffer_chunked_writes_total',
        help: 'Trajectories stored claim-check style (payload in chunks)',
        labelNames: ['buffer'],
      }),
      lostAcks: counter(registry, {
        name: 'laminar_buffer_write_lost_acks_total',
        help: 'Writes whose stored record was found after its acknowledgement was lost (counted as ok, not duplicate)',
        labelNames: ['buffer'],
      }),
      retries: counter(registry, {
        name: 'laminar_buffer_write_retries_total',
        help: 'Publish attempts retried after a transient JetStream failure',
        labelNames: ['buffer'],
      }),
    };
  }

  static async open(options: WriterOptions): Promise<ExperienceWriter> {
    const jsm = await openJetStreamManager(options.nc);
    const names = await ensureBufferStream(jsm, options);
    return new ExperienceWriter(options, jetstream(options.nc), jsm, names, options.registry ?? createRegistry({ defaultMetrics: false }));
  }

  /** How long one write keeps retrying through an outage (`retryForMs`): how long a record may still land after it began. */
  get retryWindowMs(): number {
    return this.options.retryForMs ?? DEFAULT_RETRY_FOR_MS;
  }

  /** Validates and stores one completed trajectory. */
  async write(input: unknown): Promise<WriteResult> {
    let t: Trajectory;
    try {
      t = validateTrajectory(input, { maxWeightVersion: this.options.maxWeightVersion?.() });
      checkPayloadSize(t, this.maxBytes);
      await this.checkGroup(t);
    } catch (err) {
      throw this.rejections.record(err);
    }
    return this.store(t);
  }

  /**
   * Whether this trajectory was written: its record is in the buffer, or left it (trained on,
   * evicted) within the completion horizon. The record is read first: the sampler marks a
   * trajectory completed before it removes the record, so no removal falls between the reads.
   */
  async has(id: string): Promise<boolean> {
    return (await this.storedRecord(this.names.recordSubject(id))) !== null || (await this.retry(() => this.marks.has(id)));
  }

  private async checkGroup(t: Trajectory): Promise<void> {
    const registry = this.options.groups;
    if (!registry) return;
    let n = this.groupCache.get(t.groupId);
    if (n === undefined) {
      n = await registry.groupSize(t.groupId);
      if (n === undefined)
        throw new DataInputError(ErrorCodes.UNKNOWN_GROUP, `unknown group id ${JSON.stringify(t.groupId)}`, { id: t.id, groupId: t.groupId });
      if (this.groupCache.size >= GROUP_CACHE) this.groupCache.delete(this.groupCache.keys().next().value as string);
      this.groupCache.set(t.groupId, n);
    }
    if (n !== t.groupSize) {
      throw new DataInputError(ErrorCodes.GROUP_MISMATCH, `group ${t.groupId} has ${n} samples, the trajectory says ${t.groupSize}`, {
        id: t.id,
        groupId: t.groupId,
      });
    }
  }

  private async store(t: Trajectory): Promise<WriteResult> {
    const payload = encodePayload(t.tokens, t.logprobs);
    const meta = metaOf(t, []);
    const limit = chunkLimit(this.options.nc.info?.max_payload ?? 1024 * 1024);
    const recordSubject = this.names.recordSubject(t.id);
    const chunkSeqs: number[] = [];
    if (payload.byteLength > limit) {
      // Do not leave orphan chunks behind for a trajectory that is already stored.
      const existing = await this.storedRecord(recordSubject);
      if (existing) return this.counted({ seq: existing.seq, duplicate: true, chunks: 0 }, 0);
      for (const [i, part] of splitPayload(payload, limit).entries()) {
        const ack = await this.retry(() => this.js.publish(this.names.chunkSubject(t.id), part, { msgID: chunkMsgId(t.id, i) }));
        chunkSeqs.push(ack.seq);
      }
      this.m.chunked.inc({ buffer: this.names.buffer });
    }
    const h = headers();
    h.set(META_HEADER, encodeMeta({ ...meta, chunkSeqs }));
    let attempts = 0;
    let ack: PubAck | undefined;
    try {
      ack = await this.retry(() => {
        attempts++;
        return this.js.publish(recordSubject, chunkSeqs.length > 0 ? undefined : payload, { msgID: t.id, headers: h, expect: { lastSubjectSequence: 0 } });
      });
      if (!ack.duplicate) return this.counted({ seq: ack.seq, duplicate: false, chunks: chunkSeqs.length }, payload.byteLength);
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE)) throw err;
    }
    // The buffer holds a record for this id. After a retried attempt whose acknowledgement was
    // lost (the server killed or restarted between storing and answering), it may be this
    // write's own: the stored metadata says so. Anything else is a second write of the id: a
    // duplicate, which the buffer kept out.
    const stored = await this.storedRecord(recordSubject);
    if (attempts > 1 && stored && sameRecord(stored.meta, { ...meta, chunkSeqs })) {
      this.m.lostAcks.inc({ buffer: this.names.buffer });
      return this.counted({ seq: stored.seq, duplicate: false, chunks: chunkSeqs.length }, payload.byteLength);
    }
    return this.counted({ seq: stored?.seq ?? ack?.seq ?? 0, duplicate: true, chunks: 0 }, 0);
  }

  /**
   * The record stored for a trajectory id, with its metadata (null when none, or unreadable), as
   * the stream's leader holds it: every answer here decides whether a trajectory is written again.
   */
  private async storedRecord(recordSubject: string): Promise<{ seq: number; meta: RecordMeta | null } | null> {
    const m = await this.retry(() => readFromLeader(this.jsm, this.names.stream, { last_by_subj: recordSubject }));
    if (!m) return null;
    const header = m.header.get(META_HEADER);
    let meta: RecordMeta | null = null;
    try {
      meta = header ? decodeMeta(header) : null;
    } catch {
      meta = null;
    }
    return { seq: m.seq, meta };
  }

  private counted(r: WriteResult, bytes: number): WriteResult {
    this.m.writes.inc({ buffer: this.names.buffer, result: r.duplicate ? 'duplicate' : 'ok' });
    if (!r.duplicate) this.m.bytes.inc({ buffer: this.names.buffer }, bytes);
    return r;
  }

  /** Retries transport failures (retry.ts); maps the server's answers to typed errors. */
  private async retry<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await retryTransient(fn, {
        retryForMs: this.options.retryForMs,
        onRetry: (err, attempt) => {
          this.m.retries.inc({ buffer: this.names.buffer });
          this.logger.debug({ err: (err as Error).message, attempt }, 'publish retry');
        },
      });
    } catch (err) {
      if (err instanceof JetStreamApiError) {
        if (err.code === WRONG_LAST_SEQUENCE) throw err;
        if (BUFFER_FULL_API_CODES.has(err.code)) {
          throw this.rejections.record(
            new DataCapacityError(ErrorCodes.BUFFER_FULL, `experience buffer ${this.names.buffer} is full: ${err.message}`, { cause: err }),
          );
        }
      }
      throw this.rejections.record(new StoreError(`jetstream: ${(err as Error).message}`, err, { buffer: this.names.buffer }));
    }
  }
}

/** Whether a stored record's metadata is exactly the one this write published. */
function sameRecord(stored: RecordMeta | null, ours: RecordMeta): boolean {
  // Through JSON: the stored side has no keys for absent optionals, ours holds them as undefined.
  return stored !== null && isDeepStrictEqual(JSON.parse(JSON.stringify(stored)), JSON.parse(JSON.stringify(ours)));
}
