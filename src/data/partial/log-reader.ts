/**
 * Reads back partial trajectories: one trajectory's whole log (an ordered consumer on its
 * subject), or the last message's headers of every trajectory (who owns what), which is what
 * failover and repack need before taking ownership.
 */
import { DeliverPolicy, type Consumer, type JetStreamClient } from '@nats-io/jetstream';
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

export async function readLog(js: JetStreamClient, stream: string, subject: string): Promise<PartialState | undefined> {
  const consumer = await js.consumers.get(stream, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
  // An ordered consumer left behind lives on in nats-server for its 5-minute inactivity
  // threshold: at a read per completed trajectory that is thousands of idle consumers.
  try {
    return await readLogFrom(consumer, subject);
  } finally {
    await consumer.delete().catch(() => undefined);
  }
}

async function readLogFrom(consumer: Consumer, subject: string): Promise<PartialState | undefined> {
  const info = await consumer.info(true);
  if (info.num_pending === 0) return undefined;
  const tokenParts: Uint8Array[] = [];
  const logprobParts: Uint8Array[] = [];
  let start: PartialStart | undefined;
  let owner = '';
  let state: LogKind = 'start';
  let lastSeq = 0;
  let startSeq = 0;
  let storedAt = 0;
  let count = 0;
  let segments: TrajectorySegment[] = [];
  let segmentEnd = 0;
  let waiting: AwaitedAction | undefined;
  const messages = await consumer.fetch({ max_messages: info.num_pending, expires: 10_000 });
  for await (const m of messages) {
    const msg = decodeLog(m.data);
    if (msg.kind === 'start') {
      // A later start (a returned sample started again) supersedes everything before it.
      start = msg.start;
      startSeq = m.seq;
      tokenParts.length = 0;
      logprobParts.length = 0;
      count = 0;
      segments = [];
      segmentEnd = 0;
      waiting = undefined;
    }
    if (msg.kind === 'observation' && count !== segmentEnd) {
      throw new CorruptRecordError(`partial log of ${subject} has an observation after ${count - segmentEnd} generated tokens of an open turn`);
    }
    if (msg.tokens) {
      // Deltas are contiguous by construction (each append is conditional on the previous).
      if (msg.offset !== count) throw new CorruptRecordError(`partial log of ${subject} has a gap at token ${count}`);
      tokenParts.push(msg.tokens);
      // An observation's tokens have no logprobs: 0 each (a fresh buffer is zeroed).
      logprobParts.push(msg.logprobs ?? new Uint8Array(msg.tokens.byteLength));
      count += msg.tokens.byteLength / 4;
    }
    if (msg.kind === 'turn' && msg.turn) {
      segments.push({ kind: 'generated', length: count - segmentEnd, weightVersion: msg.turn.weightVersion, finishReason: msg.turn.finishReason });
      segmentEnd = count;
    } else if (msg.kind === 'observation' && msg.action) {
      segments.push({ kind: 'observation', length: count - segmentEnd, action: msg.action });
      segmentEnd = count;
      waiting = undefined;
    } else if (msg.kind === 'waiting' && msg.waiting) {
      waiting = msg.waiting;
    }
    owner = msg.owner;
    state = msg.kind;
    lastSeq = m.seq;
    storedAt = Math.floor(m.info.timestampNanos / 1e6);
    if (m.info.pending === 0) break;
  }
  await messages.close();
  if (!start) throw new CorruptRecordError(`partial log of ${subject} has no start message`);
  const payload = joinChunks([...tokenParts, ...logprobParts], count * 8);
  const { tokens, logprobs } = decodePayload(payload, count);
  return { start, owner, state, tokens, logprobs, segments, ...(waiting ? { waiting } : {}), lastSeq, startSeq, storedAt };
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
