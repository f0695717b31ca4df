/**
 * One in-flight trajectory owned by this rollout. append() only buffers (it never blocks
 * generation); the buffered tokens go to the log every `flushTokens` tokens or `flushMs` ms,
 * one message at a time, each conditional on the previous one (expected last sequence on the
 * trajectory's subject). A takeover by another rollout appends to the same subject, so the old
 * owner's next append fails: it is fenced (ERR_NOT_OWNER) and can never resume the trajectory.
 *
 * A multi-turn trajectory also logs its segments as they happen: closeTurn() after the model's
 * turn, waitForAction() while a tool call runs (the pool's listing shows it waiting), and
 * appendObservation() with what the environment returned. Each goes on the same conditional
 * chain after the tokens buffered before it, so the log is in the order the calls were made
 * and a rollout that resumes the trajectory rebuilds its context exactly. A turn's buffered
 * tokens ride on its close's message: one append a turn, not two.
 */
import { headers } from '@nats-io/transport-node';
import { JetStreamApiError, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { DataInputError, OwnershipError } from '../errors.js';
import { retryTransient } from '../retry.js';
import { readFromLeader } from '../leader-read.js';
import {
  ACTION_HEADER,
  encodeLog,
  KIND_HEADER,
  LOG_VERSION,
  OWNER_HEADER,
  SEGMENT_LOG_VERSION,
  START_SEQ_HEADER,
  TOKENS_HEADER,
  TOOL_HEADER,
  type AwaitedAction,
  type LogKind,
  type LogMessage,
  type PartialStart,
  type TurnClose,
} from './log-codec.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { validateSegments, type ObservationAction, type ObservationSegment, type TrajectorySegment } from '../codec/segments.js';

export const WRONG_LAST_SEQUENCE = 10071;

/** What a trajectory needs from its pool (kept narrow so that it is easy to test). */
export interface TrajectoryHost {
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly stream: string;
  subject(trajectoryId: string): string;
  readonly flushTokens: number;
  onAppend(bytes: number): void;
  onFenced(): void;
  forget(t: PartialTrajectory): void;
}

function toBytes(a: Int32Array | Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

type SegmentKind = 'turn' | 'waiting' | 'observation';
type SegmentExtra = Pick<LogMessage, 'turn' | 'waiting' | 'action'>;

/**
 * What is still to be logged, in call order: runs of generated tokens (one 'delta' each) and
 * segment messages. A failed send leaves its entry at the front for the next flush, so the log
 * never skips one (a gap would make the log unreadable).
 */
type Outgoing = { kind: 'delta'; tokens: number[]; logprobs: number[] } | { kind: SegmentKind; tokens?: Int32Array; extra: SegmentExtra };

export class PartialTrajectory {
  private readonly outbox: Outgoing[] = [];
  /** Generated tokens in the outbox (the size-based flush counts these). */
  private pendingGenerated = 0;
  /** Observation tokens in the outbox. */
  private pendingObserved = 0;
  /** When the oldest pending entry was added (for the time-based flush). */
  pendingSince = 0;
  private chain: Promise<void> = Promise.resolve();
  private fenced: OwnershipError | undefined;
  private sentTokens: number;
  private readonly closedSegments: TrajectorySegment[];
  /** Response tokens the closed segments cover; the tokens after it are the open turn. */
  private segmentEnd: number;
  private awaited: AwaitedAction | undefined;

  constructor(
    private readonly host: TrajectoryHost,
    readonly start: PartialStart,
    readonly owner: string,
    private lastSeq: number,
    tokensSoFar: number,
    /** Stream sequence of the start in force: every message of ours names it. */
    private readonly startSeq: number,
    /** A resumed trajectory's closed segments and the action it waited for (PartialState). */
    resumed: { segments: readonly TrajectorySegment[]; waiting?: AwaitedAction | undefined } = { segments: [] },
  ) {
    this.sentTokens = tokensSoFar;
    this.closedSegments = [...resumed.segments];
    this.segmentEnd = this.closedSegments.reduce((n, s) => n + s.length, 0);
    this.awaited = resumed.waiting;
  }

  get trajectoryId(): string {
    return this.start.trajectoryId;
  }

  /** Response tokens of the trajectory so far (stored + buffered), observations included. */
  get tokenCount(): number {
    return this.sentTokens + this.pendingGenerated + this.pendingObserved;
  }

  /** Tokens waiting to be logged; at least 1 while a segment message waits (the timer flushes it). */
  get pendingCount(): number {
    return this.outbox.length === 0 ? 0 : Math.max(1, this.pendingGenerated + this.pendingObserved);
  }

  /** The closed segments so far (generated turns and observations), in order. */
  get segments(): readonly TrajectorySegment[] {
    return this.closedSegments;
  }

  /** The action the trajectory waits for, between waitForAction() and appendObservation(). */
  get waitingFor(): AwaitedAction | undefined {
    return this.awaited;
  }

  /** Buffers newly generated tokens and their logprobs. Throws ERR_NOT_OWNER once fenced. */
  append(tokens: ArrayLike<number>, logprobs: ArrayLike<number>): void {
    if (this.fenced) throw this.fenced;
    if (tokens.length !== logprobs.length) {
      throw new DataInputError(ErrorCodes.BAD_APPEND, `append of ${tokens.length} tokens with ${logprobs.length} logprobs`, { id: this.trajectoryId });
    }
    if (tokens.length === 0) return;
    if (this.outbox.length === 0) this.pendingSince = Date.now();
    let run = this.outbox[this.outbox.length - 1];
    if (run?.kind !== 'delta') this.outbox.push((run = { kind: 'delta', tokens: [], logprobs: [] }));
    for (let i = 0; i < tokens.length; i++) {
      run.tokens.push(tokens[i]!);
      run.logprobs.push(logprobs[i]!);
    }
    this.pendingGenerated += tokens.length;
    if (this.pendingGenerated >= this.host.flushTokens) void this.flush().catch(() => undefined);
  }

  /**
   * Closes the model's turn: the generated tokens appended since the last segment become a
   * generated segment with this weight version and finish reason. Resolves once logged.
   */
  closeTurn(turn: TurnClose): Promise<void> {
    if (this.fenced) throw this.fenced;
    const length = this.tokenCount - this.segmentEnd;
    const segment = this.checked({ kind: 'generated', length, weightVersion: turn.weightVersion, finishReason: turn.finishReason });
    this.closedSegments.push(segment);
    this.segmentEnd += length;
    return this.push({ kind: 'turn', extra: { turn: { weightVersion: turn.weightVersion, finishReason: turn.finishReason } } });
  }

  /** Marks the trajectory as waiting for an action (a tool call): the pool's listing shows it. */
  waitForAction(action: AwaitedAction): Promise<void> {
    if (this.fenced) throw this.fenced;
    this.requireClosedTurn('wait for an action');
    this.awaited = { actionId: action.actionId, tool: action.tool };
    return this.push({ kind: 'waiting', extra: { waiting: this.awaited } });
  }

  /**
   * Appends what the environment returned for an action, tokenized: an observation segment
   * (logprob 0, masked out of the loss). The model's turn before it must be closed.
   */
  appendObservation(tokens: ArrayLike<number>, action: ObservationAction): Promise<void> {
    if (this.fenced) throw this.fenced;
    this.requireClosedTurn('append an observation');
    const ids = Int32Array.from(tokens);
    const segment = this.checked({ kind: 'observation', length: ids.length, action }) as ObservationSegment;
    this.closedSegments.push(segment);
    this.segmentEnd += ids.length;
    this.awaited = undefined;
    this.pendingObserved += ids.length;
    return this.push({ kind: 'observation', tokens: ids, extra: { action: segment.action } });
  }

  /** Sends what is buffered; resolves once it is stored. */
  flush(): Promise<void> {
    this.chain = this.chain.catch(() => undefined).then(() => this.sendPending());
    return this.chain;
  }

  /** Writes a state marker (conditional, like every message of the log). */
  async mark(kind: LogKind): Promise<void> {
    await this.flush();
    this.chain = this.chain.catch(() => undefined).then(() => this.send(kind, undefined, undefined));
    return this.chain;
  }

  private push(entry: Outgoing): Promise<void> {
    if (this.outbox.length === 0) this.pendingSince = Date.now();
    this.outbox.push(entry);
    return this.flush();
  }

  private requireClosedTurn(what: string): void {
    const open = this.tokenCount - this.segmentEnd;
    if (open > 0) {
      throw new DataInputError(ErrorCodes.BAD_SEGMENTS, `cannot ${what} with ${open} generated tokens in an open turn: closeTurn() first`, {
        id: this.trajectoryId,
        open,
      });
    }
  }

  /** A new segment through the record's checks (shape and limits), so that a bad one fails at the call, not at completion. */
  private checked(segment: TrajectorySegment): TrajectorySegment {
    const all = [...this.closedSegments, segment];
    const responseLength = this.segmentEnd + segment.length;
    // Observation logprobs are 0 by construction here: a zero array of the length passes.
    return validateSegments(all, { id: this.trajectoryId, promptLength: 0, responseLength, logprobs: new Float32Array(responseLength) })[all.length - 1]!;
  }

  private async sendPending(): Promise<void> {
    if (this.fenced) throw this.fenced;
    while (this.outbox.length > 0) {
      const next = this.outbox[0]!;
      try {
        const then = this.outbox[1];
        if (next.kind === 'delta' && then?.kind === 'turn') {
          // A run its turn's close follows: one message for both (the readers apply a message's
          // tokens before its turn's close), not two appends in a row. No token joins a closed
          // turn's run, so the whole run goes.
          await this.send('turn', Int32Array.from(next.tokens), Float32Array.from(next.logprobs), then.extra);
          this.pendingGenerated -= next.tokens.length;
          this.outbox.splice(0, 2);
          continue;
        }
        if (next.kind === 'delta') {
          // The run stays last in the outbox while it is sent, so the engine's tokens streamed
          // meanwhile join it: only the ones sent here are taken off, the rest go next.
          const sent = next.tokens.length;
          await this.send('delta', Int32Array.from(next.tokens), Float32Array.from(next.logprobs));
          this.pendingGenerated -= sent;
          if (next.tokens.length > sent) {
            next.tokens.splice(0, sent);
            next.logprobs.splice(0, sent);
            continue;
          }
        } else {
          await this.send(next.kind, next.tokens, undefined, next.extra);
          this.pendingObserved -= next.tokens?.length ?? 0;
        }
      } catch (err) {
        // Transient (send() retried through it already): the entry stays first, and the
        // time-based flush tries again flushMs from now rather than at every tick.
        this.pendingSince = Date.now();
        throw err;
      }
      // Taken off only once stored.
      this.outbox.shift();
    }
    this.pendingSince = 0;
  }

  private async send(kind: LogKind, tokens: Int32Array | undefined, logprobs: Float32Array | undefined, extra: SegmentExtra = {}): Promise<void> {
    if (this.fenced) throw this.fenced;
    const count = this.sentTokens + (tokens?.length ?? 0);
    const h = headers();
    h.set(OWNER_HEADER, this.owner);
    h.set(KIND_HEADER, kind);
    h.set(TOKENS_HEADER, String(count));
    h.set(START_SEQ_HEADER, String(this.startSeq));
    if (extra.waiting) {
      h.set(ACTION_HEADER, extra.waiting.actionId);
      h.set(TOOL_HEADER, extra.waiting.tool);
    }
    const segmentKind = kind === 'turn' || kind === 'waiting' || kind === 'observation';
    const body = encodeLog({
      v: segmentKind ? SEGMENT_LOG_VERSION : LOG_VERSION,
      kind,
      owner: this.owner,
      offset: this.sentTokens,
      tokens: tokens && toBytes(tokens),
      logprobs: logprobs && toBytes(logprobs),
      ...extra,
    });
    const subject = this.host.subject(this.trajectoryId);
    try {
      const ack = await retryTransient(() => this.host.js.publish(subject, body, { headers: h, expect: { lastSubjectSequence: this.lastSeq } }));
      this.lastSeq = ack.seq;
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE)) throw err;
      // Our own earlier publish may have been stored although its ack was lost: adopt it.
      // From the leader, which refused the append: a lagging replica would show our own last append as missing.
      const last = await retryTransient(() => readFromLeader(this.host.jsm, this.host.stream, { last_by_subj: subject }));
      if (!(
        last &&
        last.header.get(OWNER_HEADER) === this.owner &&
        last.header.get(KIND_HEADER) === kind &&
        last.header.get(TOKENS_HEADER) === String(count)
      )) {
        this.fenced = new OwnershipError(ErrorCodes.NOT_OWNER, `trajectory ${this.trajectoryId} is no longer owned by ${this.owner}`, {
          details: { id: this.trajectoryId, owner: this.owner, by: last?.header.get(OWNER_HEADER) },
        });
        this.host.onFenced();
        this.host.forget(this);
        throw this.fenced;
      }
      this.lastSeq = last.seq;
    }
    this.sentTokens = count;
    if (tokens) this.host.onAppend(tokens.byteLength * (logprobs ? 2 : 1));
  }

  /** Stops tracking here without touching the log (the trajectory is handed to another rollout). */
  release(): void {
    this.host.forget(this);
  }
}
