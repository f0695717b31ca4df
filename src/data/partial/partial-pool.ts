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
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { headers } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, JetStreamApiError, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { Registry } from 'prom-client';
import { createRegistry } from '../../common/metrics.js';
import { silentLogger, type Logger } from '../../common/logger.js';
import { CorruptRecordError, DataErrorCodes, DataInputError, DataNotFoundError, OwnershipError, StoreError } from '../errors.js';
import { RejectionCounter, counter, gauge } from '../metrics.js';
import type { ExperienceWriter, WriteResult } from '../experience/writer.js';
import type { TrajectoryInput } from '../codec/trajectory.js';
import { decodeLog, encodeLog, KIND_HEADER, LOG_VERSION, OWNER_HEADER, TOKENS_HEADER, partialStartSchema, type LogKind, type PartialStart } from './log-codec.js';
import { listLogs, readLog, type PartialState, type PartialSummary } from './log-reader.js';
import { retryTransient } from '../retry.js';
import { ensurePartialStream, type PartialNames, type PartialStreamOptions } from './partial-stream.js';
import { PartialTrajectory, WRONG_LAST_SEQUENCE, type TrajectoryHost } from './partial-trajectory.js';

export interface PartialPoolOptions extends PartialStreamOptions {
  nc: NatsConnection;
  /** Send buffered tokens once this many are pending. Default 512. */
  flushTokens?: number;
  /** ... or once the oldest pending token is this old. Default 5000 ms (at most 5 s of generation to redo after a crash). */
  flushMs?: number;
  /** Where completed trajectories go; takeovers check it (see the class comment). */
  writer?: ExperienceWriter;
  registry?: Registry;
  logger?: Logger;
}

export type TakeoverResult =
  | { status: 'taken'; trajectory: PartialTrajectory; state: PartialState }
  | { status: 'completed' };

export class PartialPool {
  private readonly tracked = new Set<PartialTrajectory>();
  private readonly timer: NodeJS.Timeout;
  private readonly rejections: RejectionCounter;
  private readonly logger: Logger;
  private readonly host: TrajectoryHost;
  private readonly m;
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
    if (!(flushMs > 0) || !(flushTokens >= 1)) throw new DataInputError(DataErrorCodes.BAD_OPTIONS, 'flushMs and flushTokens must be positive');
    this.rejections = new RejectionCounter(registry, 'partial-pool');
    this.logger = (options.logger ?? silentLogger).child({ component: 'partial-pool', pool: names.pool });
    const p = { pool: names.pool };
    this.m = {
      appends: counter(registry, 'laminar_partial_appends_total', 'Messages appended to partial-trajectory logs', ['pool']),
      bytes: counter(registry, 'laminar_partial_append_bytes_total', 'Token and logprob bytes appended to partial-trajectory logs', ['pool']),
      takeovers: counter(registry, 'laminar_partial_takeovers_total', 'Trajectories taken over by another rollout (failover, repack)', ['pool']),
      fenced: counter(registry, 'laminar_partial_fenced_total', 'Appends refused because another rollout took the trajectory', ['pool']),
      completed: counter(registry, 'laminar_partial_completed_total', 'Trajectories moved to the experience buffer', ['pool']),
      inflight: gauge(registry, 'laminar_partial_tracked', 'In-flight trajectories tracked by this process', ['pool']),
    };
    const self = this;
    this.host = {
      js,
      jsm,
      stream: names.stream,
      subject: names.subject,
      flushTokens,
      onAppend: (bytes) => {
        this.m.appends.inc(p);
        this.m.bytes.inc(p, bytes);
      },
      onFenced: () => {
        this.m.fenced.inc(p);
        this.rejections.count(DataErrorCodes.NOT_OWNER);
      },
      forget(t) {
        self.tracked.delete(t);
        self.m.inflight.set(p, self.tracked.size);
      },
    };
    // One timer for every tracked trajectory: the time-based flush.
    this.timer = setInterval(() => this.flushDue(Date.now() - flushMs), Math.max(10, Math.min(250, flushMs / 4)));
    this.timer.unref();
  }

  static async open(options: PartialPoolOptions): Promise<PartialPool> {
    const jsm = await jetstreamManager(options.nc);
    const names = await ensurePartialStream(jsm, options);
    return new PartialPool(options, jetstream(options.nc), jsm, names, options.registry ?? createRegistry({ defaultMetrics: false }));
  }

  /** Starts streaming a new trajectory owned by `rolloutId`. ERR_TRAJECTORY_EXISTS if its id is in use. */
  async start(rolloutId: string, start: PartialStart): Promise<PartialTrajectory> {
    const parsed = partialStartSchema.safeParse(start);
    if (!parsed.success) throw this.rejections.record(new DataInputError(DataErrorCodes.BAD_TRAJECTORY, `invalid partial trajectory: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`));
    const s: PartialStart = { ...parsed.data, createdAt: parsed.data.createdAt ?? Date.now() };
    try {
      const seq = await this.publishMarker(s.trajectoryId, 'start', rolloutId, 0, 0, s);
      return this.track(new PartialTrajectory(this.host, s, rolloutId, seq, 0));
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE) {
        throw this.rejections.record(new OwnershipError(DataErrorCodes.TRAJECTORY_EXISTS, `trajectory ${s.trajectoryId} is already in the partial pool`, { details: { id: s.trajectoryId } }));
      }
      throw this.rejections.record(new StoreError(`jetstream: ${(err as Error).message}`, err));
    }
  }

  /** Everything in the pool (the last message of each log), or what `rolloutId` owns. */
  async list(rolloutId?: string): Promise<PartialSummary[]> {
    const all = await this.store(() => listLogs(this.js, this.names.stream, this.names.filter));
    return rolloutId === undefined ? all : all.filter((s) => s.owner === rolloutId);
  }

  /** The stored state of one trajectory (tokens and logprobs so far), or undefined. */
  async read(trajectoryId: string): Promise<PartialState | undefined> {
    return this.store(() => readLog(this.js, this.names.stream, this.names.subject(trajectoryId)));
  }

  /**
   * What a trajectory's rollout said when it started it (its weight version, group, sample), and
   * who owns it now: two direct reads (first and last message of its log), not the whole log.
   * Undefined when the trajectory is not in the pool.
   */
  async startOf(trajectoryId: string): Promise<{ start: PartialStart; owner: string } | undefined> {
    const subject = this.names.subject(trajectoryId);
    const [first, last] = await this.store(() =>
      Promise.all([this.jsm.direct.getMessage(this.names.stream, { seq: 0, next_by_subj: subject }), this.jsm.direct.getMessage(this.names.stream, { last_by_subj: subject })]),
    );
    if (!first || !last) return undefined;
    const start = decodeLog(first.data).start;
    if (!start) throw this.rejections.record(new CorruptRecordError(`partial log of ${subject} has no start message`));
    return { start, owner: last.header.get(OWNER_HEADER) };
  }

  /**
   * Takes ownership of a trajectory for `rolloutId` (failover, repack), atomically: when two
   * rollouts try, one gets ERR_NOT_OWNER. With `from`, only if `from` still owns it.
   */
  async takeOver(trajectoryId: string, rolloutId: string, options: { from?: string } = {}): Promise<TakeoverResult> {
    const state = await this.read(trajectoryId);
    if (!state) throw this.rejections.record(new DataNotFoundError(DataErrorCodes.UNKNOWN_TRAJECTORY, `trajectory ${trajectoryId} is not in the partial pool`));
    if (this.options.writer && (await this.options.writer.has(trajectoryId))) {
      // Completed, but the crash came before the partial log was purged: finish that step.
      await this.remove(trajectoryId);
      return { status: 'completed' };
    }
    if (options.from !== undefined && state.owner !== options.from) {
      throw this.rejections.record(new OwnershipError(DataErrorCodes.NOT_OWNER, `trajectory ${trajectoryId} is owned by ${state.owner}, not ${options.from}`, { details: { id: trajectoryId, owner: state.owner } }));
    }
    try {
      const seq = await this.publishMarker(trajectoryId, 'takeover', rolloutId, state.lastSeq, state.tokens.length);
      this.m.takeovers.inc({ pool: this.names.pool });
      const t = this.track(new PartialTrajectory(this.host, state.start, rolloutId, seq, state.tokens.length));
      return { status: 'taken', trajectory: t, state: { ...state, owner: rolloutId, state: 'takeover', lastSeq: seq } };
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE) {
        throw this.rejections.record(new OwnershipError(DataErrorCodes.NOT_OWNER, `trajectory ${trajectoryId} changed owner while ${rolloutId} was taking it`, { details: { id: trajectoryId } }));
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
        if ((err as { code?: string }).code !== DataErrorCodes.NOT_OWNER && (err as { code?: string }).code !== DataErrorCodes.UNKNOWN_TRAJECTORY) throw err;
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
    if (!writer) throw new DataInputError(DataErrorCodes.BAD_OPTIONS, 'the partial pool has no experience writer');
    if (final.id !== t.trajectoryId) throw this.rejections.record(new DataInputError(DataErrorCodes.BAD_TRAJECTORY, `completing ${t.trajectoryId} with a trajectory whose id is ${final.id}`));
    await t.mark('completing');
    const result = await writer.write(final);
    await this.remove(t.trajectoryId);
    t.release();
    this.m.completed.inc({ pool: this.names.pool });
    return result;
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

  private async publishMarker(trajectoryId: string, kind: LogKind, owner: string, expectSeq: number, tokens: number, start?: PartialStart): Promise<number> {
    const h = headers();
    h.set(OWNER_HEADER, owner);
    h.set(KIND_HEADER, kind);
    h.set(TOKENS_HEADER, String(tokens));
    const body = encodeLog({ v: LOG_VERSION, kind, owner, offset: tokens, start });
    // Retried through outages; a lost ack shows up as a wrong last sequence, as after a race.
    const ack = await retryTransient(() => this.js.publish(this.names.subject(trajectoryId), body, { headers: h, expect: { lastSubjectSequence: expectSeq } }));
    return ack.seq;
  }

  private async store<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await retryTransient(fn);
    } catch (err) {
      if ((err as { code?: unknown }).code === DataErrorCodes.CORRUPT_RECORD) throw this.rejections.record(err);
      throw this.rejections.record(new StoreError(`jetstream: ${(err as Error).message}`, err));
    }
  }
}
