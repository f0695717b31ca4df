/**
 * Reads back partial trajectories: one trajectory's whole log (an ordered consumer on its
 * subject), or the last message's headers of every trajectory (who owns what), which is what
 * failover and repack need before taking ownership.
 */
import { DeliverPolicy, type Consumer, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { readFromLeader } from '../leader-read.js';
import { CorruptRecordError } from '../errors.js';
import {
  ACTION_HEADER,
  decodeLog,
  KIND_HEADER,
  OWNER_HEADER,
  TOKENS_HEADER,
  TOOL_HEADER,
  type AwaitedAction,
  type LogKind,
  type PartialStart,
} from './log-codec.js';
import type { TrajectorySegment } from '../codec/segments.js';
import { decodePayload, joinChunks } from '../codec/payload.js';
import { tokenToId } from '../ids.js';

export interface PartialState {
  start: PartialStart;
  owner: string;
  /** Kind of the last message (state of the trajectory). */
  state: LogKind;
  /** The response so far (observations included, at logprob 0); the prompt is in `start`. */
  tokens: Int32Array;
  logprobs: Float32Array;
  /**
   * The closed segments, in order: they cover tokens [0, sum of lengths); the tokens after them
   * are the model's turn in progress (empty for a single-turn log, whose tokens are all open).
   */
  segments: TrajectorySegment[];
  /** The action the trajectory was waiting for when last logged (its observation not yet in). */
  waiting?: AwaitedAction;
  /** Stream sequence of the last message (ownership changes are conditional on it). */
  lastSeq: number;
  /** Stream sequence of the start in force (later messages name it). */
  startSeq: number;
  /**
   * When the last message was stored (nats-server's clock, ms since the epoch): how long a
   * 'completing' marker has stood, which decides whether its completer may still write
   * (PartialPool.takeOver).
   */
  storedAt: number;
}

export interface PartialSummary {
  trajectoryId: string;
  owner: string;
  state: LogKind;
  tokens: number;
  lastSeq: number;
  /** When the state is 'waiting': the action (tool call) the trajectory waits for. */
  waitingFor?: AwaitedAction;
}

/** How long a read waits for the replica serving it to catch up with the leader's last message. */
const REPLICA_CATCH_UP_MS = 10_000;
/** How long a pull waits for messages: nats.js's least (a pull that finds its messages returns at once). */
const PULL_EXPIRES_MS = 1000;
/** Messages asked for per pull once the consumer's own count is read. */
const PULL_MESSAGES = 256;

/**
 * One trajectory's log, through every message the stream's leader held when the read began.
 *
 * The log is streamed by an ordered consumer, which nats-server places (R1) on any replica of the
 * stream, one back from a restart among them: still applying what it missed, it holds fewer
 * messages than the leader acknowledged. Counted by that replica alone, a read just after an
 * append missed the append (test/cluster-nats/cluster-restart), and a takeover built on it was
 * refused as a change of owner. So the leader names the last message first (leader-read.ts) and
 * the consumer reads until it has delivered it.
 */
export async function readLog(js: JetStreamClient, jsm: JetStreamManager, stream: string, subject: string): Promise<PartialState | undefined> {
  const leaderLast = (): Promise<{ seq: number } | null> => readFromLeader(jsm, stream, { last_by_subj: subject });
  const last = await leaderLast();
  if (!last) return undefined;
  const consumer = await js.consumers.get(stream, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
  // An ordered consumer left behind lives on in nats-server for its 5-minute inactivity
  // threshold: at a read per completed trajectory that is thousands of idle consumers.
  try {
    return await readLogFrom(consumer, subject, last.seq, leaderLast);
  } finally {
    await consumer.delete().catch(() => undefined);
  }
}

/**
 * Folds a log's messages, in order, into its state. `through` is the leader's last message; a
 * pull that delivers nothing asks the leader again (`leaderLast`): the log may have been purged
 * (completed) since, or the replica may still be behind.
 */
export async function readLogFrom(
  consumer: Consumer,
  subject: string,
  through: number,
  leaderLast: () => Promise<{ seq: number } | null>,
): Promise<PartialState | undefined> {
  const log = new LogFold(subject);
  const deadline = Date.now() + REPLICA_CATCH_UP_MS;
  let batch = Math.max(1, (await consumer.info(true)).num_pending);
  while (log.lastSeq < through) {
    const messages = await consumer.fetch({ max_messages: batch, expires: PULL_EXPIRES_MS });
    let got = 0;
    for await (const m of messages) {
      got++;
      log.add(m);
      if (m.seq >= through) break;
    }
    await messages.close();
    batch = PULL_MESSAGES;
    if (got > 0) continue;
    // Purged while we read (completed, or returned): what was read is no longer the log. (Restarted
    // instead, its new messages come after `through`, and the first of them ends the loop.)
    if (!(await leaderLast())) return undefined;
    if (Date.now() > deadline) {
      throw new Error(`the replica serving the read of ${subject} stayed behind the stream's leader (at sequence ${log.lastSeq} of ${through})`);
    }
  }
  return log.state();
}

/** A log's state built message by message (readLogFrom). */
class LogFold {
  private readonly tokenParts: Uint8Array[] = [];
  private readonly logprobParts: Uint8Array[] = [];
  private start: PartialStart | undefined;
  private owner = '';
  private kind: LogKind = 'start';
  lastSeq = 0;
  private startSeq = 0;
  private storedAt = 0;
  private count = 0;
  private segments: TrajectorySegment[] = [];
  private segmentEnd = 0;
  private waiting: AwaitedAction | undefined;

  constructor(private readonly subject: string) {}

  add(m: JsMsg): void {
    const msg = decodeLog(m.data);
    if (msg.kind === 'start') {
      // A later start (a returned sample started again) supersedes everything before it.
      this.start = msg.start;
      this.startSeq = m.seq;
      this.tokenParts.length = 0;
      this.logprobParts.length = 0;
      this.count = 0;
      this.segments = [];
      this.segmentEnd = 0;
      this.waiting = undefined;
    }
    if (msg.kind === 'observation' && this.count !== this.segmentEnd) {
      throw new CorruptRecordError(`partial log of ${this.subject} has an observation after ${this.count - this.segmentEnd} generated tokens of an open turn`);
    }
    if (msg.tokens) {
      // Deltas are contiguous by construction (each append is conditional on the previous).
      if (msg.offset !== this.count) throw new CorruptRecordError(`partial log of ${this.subject} has a gap at token ${this.count}`);
      this.tokenParts.push(msg.tokens);
      // An observation's tokens have no logprobs: 0 each (a fresh buffer is zeroed).
      this.logprobParts.push(msg.logprobs ?? new Uint8Array(msg.tokens.byteLength));
      this.count += msg.tokens.byteLength / 4;
    }
    if (msg.kind === 'turn' && msg.turn) {
      this.segments.push({
        kind: 'generated',
        length: this.count - this.segmentEnd,
        weightVersion: msg.turn.weightVersion,
        finishReason: msg.turn.finishReason,
      });
      this.segmentEnd = this.count;
    } else if (msg.kind === 'observation' && msg.action) {
      this.segments.push({ kind: 'observation', length: this.count - this.segmentEnd, action: msg.action });
      this.segmentEnd = this.count;
      this.waiting = undefined;
    } else if (msg.kind === 'waiting' && msg.waiting) {
      this.waiting = msg.waiting;
    }
    this.owner = msg.owner;
    this.kind = msg.kind;
    this.lastSeq = m.seq;
    this.storedAt = Math.floor(m.info.timestampNanos / 1e6);
  }

  state(): PartialState {
    if (!this.start) throw new CorruptRecordError(`partial log of ${this.subject} has no start message`);
    const payload = joinChunks([...this.tokenParts, ...this.logprobParts], this.count * 8);
    const { tokens, logprobs } = decodePayload(payload, this.count);
    const { start, owner, kind: state, segments, waiting, lastSeq, startSeq, storedAt } = this;
    return { start, owner, state, tokens, logprobs, segments, ...(waiting ? { waiting } : {}), lastSeq, startSeq, storedAt };
  }
}

/** The last message of every trajectory log under `filter` (headers only). */
export async function listLogs(js: JetStreamClient, stream: string, filter: string): Promise<PartialSummary[]> {
  const consumer = await js.consumers.get(stream, { filter_subjects: filter, deliver_policy: DeliverPolicy.LastPerSubject, headers_only: true });
  try {
    const info = await consumer.info(true);
    const out: PartialSummary[] = [];
    if (info.num_pending === 0) return out;
    const messages = await consumer.fetch({ max_messages: info.num_pending, expires: 10_000 });
    for await (const m of messages) {
      out.push(summaryOf(m.subject, m.headers, m.seq));
      if (m.info.pending === 0) break;
    }
    await messages.close();
    return out;
  } finally {
    await consumer.delete().catch(() => undefined);
  }
}

/** A log's summary from its last message's subject, headers and stream sequence. */
export function summaryOf(subject: string, headers: { get(key: string): string } | undefined, seq: number): PartialSummary {
  const state = (headers?.get(KIND_HEADER) || 'delta') as LogKind;
  const summary: PartialSummary = {
    trajectoryId: tokenToId(subject.slice(subject.lastIndexOf('.') + 1)),
    owner: headers?.get(OWNER_HEADER) ?? '',
    state,
    tokens: Number(headers?.get(TOKENS_HEADER) ?? 0),
    lastSeq: seq,
  };
  if (state === 'waiting') summary.waitingFor = { actionId: headers?.get(ACTION_HEADER) ?? '', tool: headers?.get(TOOL_HEADER) ?? '' };
  return summary;
}
