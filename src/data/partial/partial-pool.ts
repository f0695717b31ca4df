/**
 * The partial-response pool (JetStream): every in-flight trajectory's tokens and logprobs so
 * far, streamed by its rollout, so that a failed rollout's work is resumed elsewhere and repack
 * can move trajectories between rollouts. Ownership changes are atomic (conditional appends to
 * the trajectory's own log), so two rollouts can never resume the same trajectory.
 *
 * Completion moves a trajectory to the experience buffer in one logical step: a conditional
 * 'completing' marker (fails if the trajectory was taken over), the idempotent experience
 * write, then the log is purged. If a crash leaves both, a takeover sees the trajectory in the
 * experience buffer and finishes the removal instead of resuming it: never both, never neither.
 * A takeover of a log whose last message is the 'completing' marker waits for the completer's
 * write (retried through an outage) to land or become impossible: until the marker is
 * `completingGraceMs` old the answer is 'completing' (ask again later), since a trajectory taken
 * then would be generated again while its record lands anyway (issue #47, the soak's double writes).
 *
 * Reads of a log's last message decide ownership (who may append next, whether a start is ours,
 * which owner a rollout keeps watching), so they go to the stream's leader (leader-read.ts): a
 * replica that lags would name an owner or a state the log has left.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { headers } from '@nats-io/transport-node';
import { jetstream, JetStreamApiError, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { openJetStreamManager } from '../jetstream-manager.js';
import type { Registry } from 'prom-client';
import { createRegistry } from '../../common/metrics.js';
import { silentLogger, type Logger } from '../../common/logger.js';
import { CorruptRecordError, DataInputError, DataNotFoundError, OwnershipError, StoreError } from '../errors.js';
import { counter, gauge } from '../../common/metric-factory.js';
import { RejectionCounter } from '../metrics.js';
import type { ExperienceWriter, WriteResult } from '../experience/writer.js';
import type { TrajectoryInput } from '../codec/trajectory.js';
import {
  decodeLog,
  encodeLog,
  KIND_HEADER,
  LOG_VERSION,
  OWNER_HEADER,
  START_SEQ_HEADER,
  TOKENS_HEADER,
  partialStartSchema,
  type LogKind,
  type PartialStart,
} from './log-codec.js';
import { listLogs, readLog, summaryOf, type PartialState, type PartialSummary } from './log-reader.js';
import { DEFAULT_RETRY_FOR_MS, retryTransient } from '../retry.js';
import { readFromLeader } from '../leader-read.js';
import { ensurePartialStream, type PartialNames, type PartialStreamOptions } from './partial-stream.js';
import { PartialTrajectory, WRONG_LAST_SEQUENCE, type TrajectoryHost } from './partial-trajectory.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface PartialPoolOptions extends PartialStreamOptions {
  nc: NatsConnection;
  /** Send buffered tokens once this many are pending. Default 512. */
  flushTokens?: number;
  /** ... or once the oldest pending token is this old. Default 5000 ms (at most 5 s of generation to redo after a crash). */
  flushMs?: number;
  /** Where completed trajectories go; takeovers check it (see the class comment). */
  writer?: ExperienceWriter;
  /**
   * How long after its 'completing' marker a trajectory is left to its completer: takeOver answers
   * 'completing' until then. Default: the writer's retry window (`retryForMs`, 30 s) plus
   * COMPLETING_GRACE_MARGIN_MS. Set it above the completers' write retry window.
   */
  completingGraceMs?: number;
  registry?: Registry;
  logger?: Logger;
}

/**
 * Added to the writer's retry window for the default `completingGraceMs`: the write attempt in
 * flight when the window closes (a request timeout), the purge after it, and the difference
 * between this host's clock and nats-server's (the marker's age is the one minus the other).
 */
export const COMPLETING_GRACE_MARGIN_MS = 15_000;

/** The default `completingGraceMs` for completers whose writes retry for `retryWindowMs`. */
export function defaultCompletingGraceMs(retryWindowMs = DEFAULT_RETRY_FOR_MS): number {
  return retryWindowMs + COMPLETING_GRACE_MARGIN_MS;
}

/**
 * What takeOver did. 'taken': the trajectory is `rolloutId`'s; `finished` when its log ended in
 * a completion whose record never landed (its completer died between marker and write): the
 * response is whole, so resuming it would generate past its end: park it and return its sample.
 * 'completed': its record is in the buffer (the log is purged). 'completing': its completer may
 * still write its record; nothing was changed, ask again in `retryAfterMs`.
 */
export type TakeoverResult =
  | { status: 'taken'; trajectory: PartialTrajectory; state: PartialState; finished: boolean }
  | { status: 'completed' }
  | { status: 'completing'; retryAfterMs: number };

export class PartialPool {
  private readonly tracked = new Set<PartialTrajectory>();
  private readonly timer: NodeJS.Timeout;
  private readonly rejections: RejectionCounter;
  private readonly logger: Logger;
  private readonly host: TrajectoryHost;
  private readonly m;
  private readonly completingGraceMs: number;
  private closed = false;

  private constructor(
    private readonly options: PartialPoolOptions,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    readonly names: PartialNames,
    registry: Registry,
  ) {
    const flushMs = options.flushMs ?? 5000;
    const flushTokens = options.flushTokens ?? 512;
    if (!(flushMs > 0) || !(flushTokens >= 1)) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'flushMs and flushTokens must be positive');
    this.completingGraceMs = options.completingGraceMs ?? defaultCompletingGraceMs(options.writer?.retryWindowMs);
    if (!(this.completingGraceMs >= 0)) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'completingGraceMs must be 0 or more');
    this.rejections = new RejectionCounter(registry, 'partial-pool');
    this.logger = (options.logger ?? silentLogger).child({ component: 'partial-pool', pool: names.pool });
    const p = { pool: names.pool };
    this.m = {
      appends: counter(registry, { name: 'laminar_partial_appends_total', help: 'Messages appended to partial-trajectory logs', labelNames: ['pool'] }),
      bytes: counter(registry, {
        name: 'laminar_partial_append_bytes_total',
        help: 'Token and logprob bytes appended to partial-trajectory logs',
        labelNames: ['pool'],
      }),
      takeovers: counter(registry, {
        name: 'laminar_partial_takeovers_total',
        help: 'Trajectories taken over by another rollout (failover, repack)',
        labelNames: ['pool'],
      }),
      restarts: counter(registry, {
        name: 'laminar_partial_restarts_total',
        help: 'Returned samples started again from their first token in their own log',
        labelNames: ['pool'],
      }),
      fenced: counter(registry, {
        name: 'laminar_partial_fenced_total',
        help: 'Appends refused because another rollout took the trajectory',
        labelNames: ['pool'],
      }),
      completed: counter(registry, { name: 'laminar_partial_completed_total', help: 'Trajectories moved to the experience buffer', labelNames: ['pool'] }),
      inflight: gauge(registry, { name: 'laminar_partial_tracked', help: 'In-flight trajectories tracked by this process', labelNames: ['pool'] }),
    };
    this.host = {
      js,
      jsm,
      stream: names.stream,
      subject: (id) => names.subject(id),
      flushTokens,
      onAppend: (bytes) => {
        this.m.appends.inc(p);
        this.m.bytes.inc(p, bytes);
      },
      onFenced: () => {
        this.m.fenced.inc(p);
        this.rejections.count(ErrorCodes.NOT_OWNER);
      },
      forget: (t) => {
        this.tracked.delete(t);
        this.m.inflight.set(p, this.tracked.size);
      },
    };
    // One timer for every tracked trajectory: the time-based flush.
    this.timer = setInterval(() => this.flushDue(Date.now() - flushMs), Math.max(10, Math.min(250, flushMs / 4)));
    this.timer.unref();
  }

  static async open(options: PartialPoolOptions): Promise<PartialPool> {
    const jsm = await openJetStreamManager(options.nc);
    const names = await ensurePartialStream(jsm, options);
    return new PartialPool(options, jetstream(options.nc), jsm, names, options.registry ?? createRegistry({ defaultMetrics: false }));
  }

  /** Starts streaming a new trajectory owned by `rolloutId`. ERR_TRAJECTORY_EXISTS if its id is in use. */
  async start(rolloutId: string, start: PartialStart): Promise<PartialTrajectory> {
    const s = this.parseStart(start);
    try {
      const seq = await this.publishStart(s, rolloutId, 0);
      return this.track(new PartialTrajectory(this.host, s, rolloutId, seq, 0, seq));
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE) {
        throw this.rejections.record(
          new OwnershipError(ErrorCodes.TRAJECTORY_EXISTS, `trajectory ${s.trajectoryId} is already in the partial pool`, { details: { id: s.trajectoryId } }),
        );
      }
      throw this.rejections.record(new StoreError(`jetstream: ${(err as Error).message}`, err));
    }
  }

  /**
   * Starts a trajectory that `from` holds (a returned sample, parked) again from its first token,
   * for `rolloutId`, in one atomic step: a start message conditional on the log's last message.
   * When two rollouts try, one gets ERR_NOT_OWNER; so does one that finds another owner. A log
   * that is gone meanwhile is started anew. The superseded messages are purged afterwards (a
   * crash before that leaves them to be ignored by readers, and purged by the next restart or
   * the completion).
   */
  async restart(rolloutId: string, start: PartialStart, options: { from: string }): Promise<PartialTrajectory> {
    const s = this.parseStart(start);
    const subject = this.names.subject(s.trajectoryId);
    const last = await this.store(() => readFromLeader(this.jsm, this.names.stream, { last_by_subj: subject }));
    if (!last) {
      // Gone meanwhile (completed and purged, or removed): start it, unless someone else just did.
      return this.start(rolloutId, s).catch((err: unknown) => {
        if ((err as { code?: string }).code !== ErrorCodes.TRAJECTORY_EXISTS) throw err;
        throw new OwnershipError(ErrorCodes.NOT_OWNER, `trajectory ${s.trajectoryId} was started by another rollout meanwhile`, {
          details: { id: s.trajectoryId },
        });
      });
    }
    const owner = last.header.get(OWNER_HEADER);
    const notOwner = (): OwnershipError =>
      this.rejections.record(
        new OwnershipError(ErrorCodes.NOT_OWNER, `trajectory ${s.trajectoryId} is owned by ${owner}, not ${options.from}`, {
          details: { id: s.trajectoryId, owner },
        }),
      );
    if (owner !== options.from) throw notOwner();
    let seq: number;
    try {
      seq = await this.publishStart(s, rolloutId, last.seq);
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE) throw notOwner();
      throw this.rejections.record(new StoreError(`jetstream: ${(err as Error).message}`, err));
    }
    this.m.restarts.inc({ pool: this.names.pool });
    await this.jsm.streams.purge(this.names.stream, { filter: subject, seq }).catch((err: unknown) => {
      this.logger.debug({ err: (err as Error).message, id: s.trajectoryId }, 'superseded messages of a restarted trajectory not purged');
    });
    return this.track(new PartialTrajectory(this.host, s, rolloutId, seq, 0, seq));
  }

  /** Everything in the pool (the last message of each log), or what `rolloutId` owns. */
  async list(rolloutId?: string): Promise<PartialSummary[]> {
    const all = await this.store(() => listLogs(this.js, this.names.stream, this.names.filter));
    return rolloutId === undefined ? all : all.filter((s) => s.owner === rolloutId);
  }

  /**
   * One trajectory's summary (owner, state, tokens), as `list` gives it, from one read of its
   * last message (from the stream's leader): what a rollout checks for a trajectory it may own without reading the
   * whole pool. Undefined when the trajectory is not in the pool.
   */
  async summary(trajectoryId: string): Promise<PartialSummary | undefined> {
    const subject = this.names.subject(trajectoryId);
    const last = await this.store(() => readFromLeader(this.jsm, this.names.stream, { last_by_subj: subject }));
    return last ? summaryOf(subject, last.header, last.seq) : undefined;
  }

  /** The stored state of one trajectory (tokens and logprobs so far), or undefined. */
  async read(trajectoryId: string): Promise<PartialState | undefined> {
    return this.store(() => readLog(this.js, this.jsm, this.names.stream, this.names.subject(trajectoryId)));
  }

  /**
   * What a trajectory's rollout said when it started it (its weight version, group, sample), and
   * who owns it now: two reads from the stream's leader (the last message of its log, and the
   * start it names), not the whole log. Undefined when the trajectory is not in the pool.
   */
  async startOf(trajectoryId: string): Promise<{ start: PartialStart; owner: string } | undefined> {
    const subject = this.names.subject(trajectoryId);
    // A restart or a completion between the two reads removes the start the first one named: read again.
    for (let attempt = 0; ; attempt++) {
      const last = await this.store(() => readFromLeader(this.jsm, this.names.stream, { last_by_subj: subject }));
      if (!last) return undefined;
      const owner = last.header.get(OWNER_HEADER);
      if (last.header.get(KIND_HEADER) === 'start') return { start: this.startIn(last.data, subject), owner };
      const named = Number(last.header.get(START_SEQ_HEADER));
      // Logs written before the header existed were never restarted: their start is their first message.
      const first = await this.store(() => readFromLeader(this.jsm, this.names.stream, named > 0 ? { seq: named } : { seq: 0, next_by_subj: subject }));
      if (first && first.subject === subject && first.header.get(KIND_HEADER) === 'start') return { start: this.startIn(first.data, subject), owner };
      if (attempt === 2)
        throw this.rejections.record(
          new CorruptRecordError(`partial log of ${subject} has no start message${named > 0 ? ` at the sequence its last message names (${named})` : ''}`),
        );
    }
  }

  /**
   * Takes ownership of a trajectory for `rolloutId` (failover, repack), atomically: when two
   * rollouts try, one gets ERR_NOT_OWNER. With `from`, only if `from` still owns it. A trajectory
   * being completed is left to its completer for `completingGraceMs` ('completing': ask again
   * later); see TakeoverResult.
   */
  async takeOver(trajectoryId: string, rolloutId: string, options: { from?: string } = {}): Promise<TakeoverResult> {
    const state = await this.read(trajectoryId);
    if (!state) throw this.rejections.record(new DataNotFoundError(ErrorCodes.UNKNOWN_TRAJECTORY, `trajectory ${trajectoryId} is not in the partial pool`));
    if (await this.completedAlready(trajectoryId)) return { status: 'completed' };
    if (options.from !== undefined && state.owner !== options.from) {
      throw this.rejections.record(
        new OwnershipError(ErrorCodes.NOT_OWNER, `trajectory ${trajectoryId} is owned by ${state.owner}, not ${options.from}`, {
          details: { id: trajectoryId, owner: state.owner },
        }),
      );
    }
    const finished = state.state === 'completing';
    if (finished) {
      // Its completer wrote the marker and may still be writing the record (retried through an
      // outage): taken now, the sample would be generated again and the record land anyway.
      // At most the grace: a nats-server clock ahead of ours would make the marker look younger.
      const retryAfterMs = Math.min(this.completingGraceMs, state.storedAt + this.completingGraceMs - Date.now());
      if (retryAfterMs > 0) return { status: 'completing', retryAfterMs };
      // Past the grace the write can no longer land: what the buffer says now is final.
      if (await this.completedAlready(trajectoryId)) return { status: 'completed' };
    }
    try {
      const seq = await this.publishTakeover(trajectoryId, rolloutId, state);
      this.m.takeovers.inc({ pool: this.names.pool });
      const t = this.track(
        new PartialTrajectory(this.host, state.start, rolloutId, seq, state.tokens.length, state.startSeq, {
          segments: state.segments,
          waiting: state.waiting,
        }),
      );
      return { status: 'taken', trajectory: t, state: { ...state, owner: rolloutId, state: 'takeover', lastSeq: seq }, finished };
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE) {
        throw this.rejections.record(
          new OwnershipError(ErrorCodes.NOT_OWNER, `trajectory ${trajectoryId} changed owner while ${rolloutId} was taking it`, {
            details: { id: trajectoryId },
          }),
        );
      }
      throw this.rejections.record(new StoreError(`jetstream: ${(err as Error).message}`, err));
    }
  }

  /** Failover: takes over everything `fromRollout` owned; those someone else got first are skipped. */
  async takeOverAll(fromRollout: string, toRollout: string): Promise<TakeoverResult[]> {
    const out: TakeoverResult[] = [];
    for (const s of await this.list(fromRollout)) {
      try {
        out.push(await this.takeOver(s.trajectoryId, toRollout, { from: fromRollout }));
      } catch (err) {
        if ((err as { code?: string }).code !== ErrorCodes.NOT_OWNER && (err as { code?: string }).code !== ErrorCodes.UNKNOWN_TRAJECTORY) throw err;
      }
    }
    return out;
  }

  /**
   * Moves a finished trajectory to the experience buffer: conditional 'completing' marker
   * (ERR_NOT_OWNER if it was taken over: nothing is written), idempotent write, purge.
   */
  async complete(t: PartialTrajectory, final: TrajectoryInput): Promise<WriteResult> {
    const writer = this.options.writer;
    if (!writer) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'the partial pool has no experience writer');
    if (final.id !== t.trajectoryId)
      throw this.rejections.record(new DataInputError(ErrorCodes.BAD_TRAJECTORY, `completing ${t.trajectoryId} with a trajectory whose id is ${final.id}`));
    await t.mark('completing');
    const result = await writer.write(final);
    await this.remove(t.trajectoryId);
    t.release();
    this.m.completed.inc({ pool: this.names.pool });
    return result;
  }

  /**
   * Whether the trajectory's record is in the experience buffer (a read from the buffer's leader).
   * If so its log is left from a completion interrupted before the purge: that step is finished.
   */
  private async completedAlready(trajectoryId: string): Promise<boolean> {
    if (!this.options.writer || !(await this.options.writer.has(trajectoryId))) return false;
    await this.remove(trajectoryId);
    return true;
  }

  /** Deletes a trajectory's log (completed, or abandoned for good). */
  async remove(trajectoryId: string): Promise<void> {
    await this.store(() => this.jsm.streams.purge(this.names.stream, { filter: this.names.subject(trajectoryId) }));
  }

  /** Flushes every tracked trajectory. */
  async flushAll(): Promise<void> {
    await Promise.allSettled([...this.tracked].map((t) => t.flush()));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    await this.flushAll();
  }

  private track(t: PartialTrajectory): PartialTrajectory {
    this.tracked.add(t);
    this.m.inflight.set({ pool: this.names.pool }, this.tracked.size);
    return t;
  }

  private flushDue(olderThan: number): void {
    for (const t of this.tracked) {
      if (t.pendingCount > 0 && t.pendingSince <= olderThan) {
        t.flush().catch((err: unknown) => this.logger.debug({ err: (err as Error).message, id: t.trajectoryId }, 'partial flush failed'));
      }
    }
  }

  private parseStart(start: PartialStart): PartialStart {
    const parsed = partialStartSchema.safeParse(start);
    if (!parsed.success)
      throw this.rejections.record(
        new DataInputError(
          ErrorCodes.BAD_TRAJECTORY,
          `invalid partial trajectory: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
        ),
      );
    return { ...parsed.data, createdAt: parsed.data.createdAt ?? Date.now() };
  }

  private startIn(data: Uint8Array, subject: string): PartialStart {
    const start = decodeLog(data).start;
    if (!start) throw this.rejections.record(new CorruptRecordError(`partial log of ${subject} has a start message without its start`));
    return start;
  }

  /**
   * A start message, conditional on the log's last sequence being `expectSeq` (0: no log yet).
   * Retried through outages; when an ack was lost and the retry finds its own start already
   * stored (same owner and createdAt), that one is adopted instead of reporting a race.
   */
  private async publishStart(s: PartialStart, owner: string, expectSeq: number): Promise<number> {
    const subject = this.names.subject(s.trajectoryId);
    try {
      return await this.publishMessage(subject, 'start', owner, 0, expectSeq, undefined, s);
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE)) throw err;
      const last = await retryTransient(() => readFromLeader(this.jsm, this.names.stream, { last_by_subj: subject })).catch(() => null);
      if (last && last.seq > expectSeq && last.header.get(OWNER_HEADER) === owner && last.header.get(KIND_HEADER) === 'start') {
        const stored = decodeLog(last.data).start;
        if (stored?.createdAt === s.createdAt) return last.seq;
      }
      throw err;
    }
  }

  private publishTakeover(trajectoryId: string, owner: string, state: PartialState): Promise<number> {
    // A lost ack shows up as a wrong last sequence, as after a race.
    return this.publishMessage(this.names.subject(trajectoryId), 'takeover', owner, state.tokens.length, state.lastSeq, state.startSeq);
  }

  private async publishMessage(
    subject: string,
    kind: LogKind,
    owner: string,
    tokens: number,
    expectSeq: number,
    startSeq: number | undefined,
    start?: PartialStart,
  ): Promise<number> {
    const h = headers();
    h.set(OWNER_HEADER, owner);
    h.set(KIND_HEADER, kind);
    h.set(TOKENS_HEADER, String(tokens));
    if (startSeq !== undefined) h.set(START_SEQ_HEADER, String(startSeq));
    const body = encodeLog({ v: LOG_VERSION, kind, owner, offset: tokens, start });
    const ack = await retryTransient(() => this.js.publish(subject, body, { headers: h, expect: { lastSubjectSequence: expectSeq } }));
    return ack.seq;
  }

  private async store<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await retryTransient(fn);
    } catch (err) {
      if ((err as { code?: unknown }).code === ErrorCodes.CORRUPT_RECORD) throw this.rejections.record(err);
      throw this.rejections.record(new StoreError(`jetstream: ${(err as Error).message}`, err));
    }
  }
}
