/**
 * Messages of a partial trajectory's log (one subject per trajectory). The body is versioned
 * msgpack; the owner, kind and token count are also headers, so that listing who owns what
 * reads only the last message's headers per trajectory.
 *
 * A log may hold more than one 'start': a returned sample is started again in place, by a start
 * message conditional on the parked log's last one (one atomic step, so that a crash cannot
 * leave the sample in neither pool). The last start is the one in force: every other message
 * names it in a header (its stream sequence), readers ignore what came before it, and the older
 * messages are purged once the new start is stored.
 *
 * A multi-turn trajectory's log also records its segments as they happen (version 2 messages,
 * written only by a trajectory that uses them, so that a single-turn log is what it always was):
 * 'turn' closes the generated tokens since the last segment with their weight version and
 * finish reason (carrying the turn's tokens not yet logged, if any, applied before the close),
 * 'waiting' says the trajectory waits for an action (tool call), and
 * 'observation' carries the tokens the environment returned and the action they answer.
 */
import { pack, unpack } from 'msgpackr';
import { z } from 'zod';
import { ACTION_STATUSES, type ObservationAction } from '../codec/segments.js';

export const OWNER_HEADER = 'Laminar-Owner';
export const KIND_HEADER = 'Laminar-Kind';
export const TOKENS_HEADER = 'Laminar-Tokens';
/** On every message but a start: the stream sequence of the start in force. */
export const START_SEQ_HEADER = 'Laminar-Start-Seq';
/** On a 'waiting' message: the action id and tool waited for (listing shows them from headers alone). */
export const ACTION_HEADER = 'Laminar-Action';
export const TOOL_HEADER = 'Laminar-Tool';
export const LOG_VERSION = 1;
/** Messages of the kinds that segments added ('turn', 'waiting', 'observation'). */
export const SEGMENT_LOG_VERSION = 2;

/**
 * Owner of trajectories the manager took from a dead rollout and could not place: the take-over
 * fences the dead rollout should it come back, and a rollout that claims the returned sample
 * restarts a parked log from scratch. A reserved owner name of the log: the manager writes it,
 * rollouts read and write it.
 */
export const PARKED_OWNER = 'laminar:parked';

/**
 * The key a parked log's sample is returned to the prompt pool under (`returnSamples({ key })`):
 * the trajectory and the sequence of the parking marker. Whoever parks it, and any manager that
 * later finds it parked, names the same parking the same way, so the sample is queued once; a
 * later parking of the same trajectory (it was restarted meanwhile) is a new return.
 */
export const parkedReturnKey = (trajectoryId: string, parkingSeq: number): string => `${trajectoryId}@${parkingSeq}`;

export type LogKind = 'start' | 'delta' | 'takeover' | 'completing' | 'turn' | 'waiting' | 'observation';

/** The close of a generated turn ('turn' message). */
export interface TurnClose {
  weightVersion: number;
  finishReason: string;
}

/** The action a trajectory waits for ('waiting' message). */
export interface AwaitedAction {
  actionId: string;
  tool: string;
}

/**
 * The kind of a log message from its headers alone (no body decoded), for tools that watch the
 * pool's subjects, e.g. to count the trajectories started; undefined for a message without one.
 */
export function partialLogKind(headers: { get(name: string): string } | undefined): LogKind | undefined {
  const kind = headers?.get(KIND_HEADER);
  return kind ? (kind as LogKind) : undefined;
}

/** The owner a partial-log message names (its writer: a rollout, or the parked owner); undefined without one. */
export function partialLogOwner(headers: { get(name: string): string } | undefined): string | undefined {
  return headers?.get(OWNER_HEADER) || undefined;
}

/** Which trajectory: its id, its place in a GRPO group and the weight version generating it. */
export interface TrajectoryIdentity {
  trajectoryId: string;
  promptId: string;
  groupId: string;
  sampleIndex: number;
  groupSize: number;
  weightVersion: number;
}

/** What a rollout says about a trajectory when it starts generating it. */
export interface PartialStart extends TrajectoryIdentity {
  /** Prompt tokens, when the rollout wants them kept for a resume elsewhere. */
  promptLength?: number;
  /** The prompt's token ids (int32, little-endian): what another rollout re-prefills on resume. */
  promptTokens?: Uint8Array;
  /** The prompt's payload from the prompt pool (what the reward needs), for a resume elsewhere. */
  payload?: unknown;
  createdAt?: number;
}

export interface LogMessage {
  v: number;
  kind: LogKind;
  owner: string;
  /** Token index of the first token in this message. */
  offset: number;
  tokens?: Uint8Array;
  logprobs?: Uint8Array;
  start?: PartialStart;
  turn?: TurnClose;
  waiting?: AwaitedAction;
  /** On an 'observation': the action its tokens answer (the tokens have no logprobs). */
  action?: ObservationAction;
}

const startSchema = z.object({
  trajectoryId: z.string().min(1),
  promptId: z.string().min(1),
  groupId: z.string().min(1),
  sampleIndex: z.number().int().nonnegative(),
  groupSize: z.number().int().positive(),
  weightVersion: z.number().int().nonnegative(),
  promptLength: z.number().int().nonnegative().optional(),
  promptTokens: z
    .instanceof(Uint8Array)
    .refine((b) => b.byteLength % 4 === 0, 'int32 token ids')
    .optional(),
  payload: z.unknown().optional(),
  createdAt: z.number().optional(),
});

export const partialStartSchema = startSchema;

const messageSchema = z.object({
  v: z.union([z.literal(LOG_VERSION), z.literal(SEGMENT_LOG_VERSION)]),
  kind: z.enum(['start', 'delta', 'takeover', 'completing', 'turn', 'waiting', 'observation']),
  owner: z.string(),
  offset: z.number().int().nonnegative(),
  tokens: z.instanceof(Uint8Array).optional(),
  logprobs: z.instanceof(Uint8Array).optional(),
  start: startSchema.optional(),
  turn: z.object({ weightVersion: z.number().int().nonnegative(), finishReason: z.string() }).optional(),
  waiting: z.object({ actionId: z.string(), tool: z.string() }).optional(),
  action: z
    .object({
      tool: z.string(),
      actionId: z.string(),
      status: z.enum(ACTION_STATUSES as [string, ...string[]]),
      latencyMs: z.number().nonnegative(),
    })
    .optional(),
});

export function encodeLog(m: LogMessage): Uint8Array {
  return pack(Object.fromEntries(Object.entries(m).filter(([, v]) => v !== undefined)));
}

export function decodeLog(bytes: Uint8Array): LogMessage {
  return messageSchema.parse(unpack(bytes)) as LogMessage;
}
