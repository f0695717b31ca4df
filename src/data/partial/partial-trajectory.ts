/**
 * One in-flight trajectory owned by this rollout. append() only buffers (it never blocks
 * generation); the buffered tokens go to the log every `flushTokens` tokens or `flushMs` ms,
 * one message at a time, each conditional on the previous one (expected last sequence on the
 * trajectory's subject). A takeover by another rollout appends to the same subject, so the old
 * owner's next append fails: it is fenced (ERR_NOT_OWNER) and can never resume the trajectory.
 */
import { headers } from '@nats-io/transport-node';
import { JetStreamApiError, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { DataInputError, OwnershipError } from '../errors.js';
import { retryTransient } from '../retry.js';
import { encodeLog, KIND_HEADER, LOG_VERSION, OWNER_HEADER, START_SEQ_HEADER, TOKENS_HEADER, type LogKind, type PartialStart } from './log-codec.js';
import { ErrorCodes } from '../../common/error-codes.js';

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

export class PartialTrajectory {
  private pendingTokens: number[] = [];
  private pendingLogprobs: number[] = [];
  /** When the oldest pending token was appended (for the time-based flush). */
  pendingSince = 0;
  private chain: Promise<void> = Promise.resolve();
  private fenced: OwnershipError | undefined;
  private sentTokens: number;

  constructor(
    private readonly host: TrajectoryHost,
    readonly start: PartialStart,
    readonly owner: string,
    private lastSeq: number,
    tokensSoFar: number,
    /** Stream sequence of the start in force: every message of ours names it. */
    private readonly startSeq: number,
  ) {
    this.sentTokens = tokensSoFar;
  }

  get trajectoryId(): string {
    return this.start.trajectoryId;
  }

  /** Tokens of the trajectory so far (stored + buffered). */
  get tokenCount(): number {
    return this.sentTokens + this.pendingTokens.length;
  }

  get pendingCount(): number {
    return this.pendingTokens.length;
  }

  /** Buffers newly generated tokens and their logprobs. Throws ERR_NOT_OWNER once fenced. */
  append(tokens: ArrayLike<number>, logprobs: ArrayLike<number>): void {
    if (this.fenced) throw this.fenced;
    if (tokens.length !== logprobs.length) {
      throw new DataInputError(ErrorCodes.BAD_APPEND, `append of ${tokens.length} tokens with ${logprobs.length} logprobs`, { id: this.trajectoryId });
    }
    if (tokens.length === 0) return;
    if (this.pendingTokens.length === 0) this.pendingSince = Date.now();
    for (let i = 0; i < tokens.length; i++) {
      this.pendingTokens.push(tokens[i]!);
      this.pendingLogprobs.push(logprobs[i]!);
    }
    if (this.pendingTokens.length >= this.host.flushTokens) void this.flush().catch(() => undefined);
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

  private async sendPending(): Promise<void> {
    if (this.fenced) throw this.fenced;
    if (this.pendingTokens.length === 0) return;
    const tokens = Int32Array.from(this.pendingTokens);
    const logprobs = Float32Array.from(this.pendingLogprobs);
    this.pendingTokens = [];
    this.pendingLogprobs = [];
    this.pendingSince = 0;
    try {
      await this.send('delta', tokens, logprobs);
    } catch (err) {
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- send() sets this.fenced while it is awaited; the narrowing from the check above does not survive the await
      if (!this.fenced) {
        // Transient: keep the tokens for the next flush, in order.
        this.pendingTokens = [...tokens, ...this.pendingTokens];
        this.pendingLogprobs = [...logprobs, ...this.pendingLogprobs];
        this.pendingSince = Date.now();
      }
      throw err;
    }
  }

  private async send(kind: LogKind, tokens: Int32Array | undefined, logprobs: Float32Array | undefined): Promise<void> {
    if (this.fenced) throw this.fenced;
    const count = this.sentTokens + (tokens?.length ?? 0);
    const h = headers();
    h.set(OWNER_HEADER, this.owner);
    h.set(KIND_HEADER, kind);
    h.set(TOKENS_HEADER, String(count));
    h.set(START_SEQ_HEADER, String(this.startSeq));
    const body = encodeLog({
      v: LOG_VERSION,
      kind,
      owner: this.owner,
      offset: this.sentTokens,
      tokens: tokens && toBytes(tokens),
      logprobs: logprobs && toBytes(logprobs),
    });
    const subject = this.host.subject(this.trajectoryId);
    try {
      const ack = await retryTransient(() => this.host.js.publish(subject, body, { headers: h, expect: { lastSubjectSequence: this.lastSeq } }));
      this.lastSeq = ack.seq;
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === WRONG_LAST_SEQUENCE)) throw err;
      // Our own earlier publish may have been stored although its ack was lost: adopt it.
      const last = await retryTransient(() => this.host.jsm.direct.getMessage(this.host.stream, { last_by_subj: subject }));
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
    if (tokens) this.host.onAppend(tokens.byteLength * 2);
  }

  /** Stops tracking here without touching the log (the trajectory is handed to another rollout). */
  release(): void {
    this.host.forget(this);
  }
}
