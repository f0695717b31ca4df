/**
 * The control plane's wire schema: every message and KV value is a msgpack map carrying the
 * schema version `v`, validated with zod on receipt. A decoding or validation failure is a
 * ControlError with a stable code, never an exception that reaches an event loop.
 *
 * Schema version 1 (docs/reference/protocols.md, "Control plane"):
 *   register   member -> manager (request)   who I am, where my UCX listener is, what I hold
 *   registered / refused                     the manager's answer
 *   heartbeat  member -> manager             every --heartbeat, with broadcast progress (relays)
 *                                            or engine load (rollouts: `rollout`)
 *   report     member -> manager             a transport error about a neighbour
 *   command    manager -> member             reregister | load (a checkpoint) | repack-out |
 *                                            repack-in | update-weights | reinitialise
 *   reply      member -> manager             done | failed (answer to a command sent as a request)
 *   plan       KV "plan"                     the chain, master first, under an epoch
 *   lease      KV "leader"                   the active manager's lease
 *   member     KV "member.<id>"              a registration, kept for a restarted manager
 *   announce   KV "version.<model>"          the trainer's newest version and its checkpoint
 *   batch      sampler -> manager            `laminar.expbatch.<buffer>`: a batch handed to the
 *                                            trainer, its staleness counts (consumption staleness)
 */
import { pack, unpack } from 'msgpackr';
import { z } from 'zod';
import { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export const SCHEMA_VERSION = 1;

export class ControlError extends LaminarError {}

const id = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/);
const model = z.string().min(1).max(256);
const version = z.number().int().nonnegative();
const epoch = z.number().int().nonnegative();
const incarnation = z.string().regex(/^[0-9a-f]{8,64}$/);
const address = z.string().max(64);

export const memberKinds = ['relay', 'rollout', 'trainer'] as const;
export type MemberKind = (typeof memberKinds)[number];

/** A version a relay holds; `kind`: a full copy of the weights or a LoRA adapter (optional: older relays leave it out). */
const holding = z.object({ model, version, kind: z.enum(['full', 'lora']).optional() });
/** A version arriving at a relay; `settingUp`: its segment is still being allocated (optional: older relays leave it out). */
const progress = z.object({ model, version, hwm: z.number().int().nonnegative(), chunks: z.number().int().positive(), settingUp: z.boolean().optional() });

export const registerSchema = z.object({
  v: z.literal(SCHEMA_VERSION),
  t: z.literal('register'),
  id,
  kind: z.enum(memberKinds),
  incarnation,
  host: z.string().min(1).max(255),
  labels: z.record(z.string().max(64), z.string().max(256)).default({}),
  address: address.nullable(),
  socket: z.string().max(4096).nullable(),
  holds: z.array(holding).max(1024).default([]),
});

export const registerReplySchema = z.discriminatedUnion('t', [
  z.object({ v: z.literal(SCHEMA_VERSION), t: z.literal('registered'), epoch: epoch.nullable(), manager: z.string() }),
  z.object({ v: z.literal(SCHEMA_VERSION), t: z.literal('refused'), code: z.string(), message: z.string() }),
]);

/** What a rollout reports about its engine each heartbeat (the repack planner's input). */
/** Trajectories a rollout lists in its load at most (a heartbeat stays small). */
export const MAX_REPORTED_TRAJECTORIES = 4096;

export const rolloutLoadSchema = z.object({
  state: z.enum(['idle', 'loading', 'generating', 'reinitialising']),
  model: model.nullable(),
  /** Weight version in use; null before the first load. */
  weightVersion: version.nullable(),
  /** KV-cache utilisation now and at the previous report, fractions of the cache. */
  kvUsed: z.number().min(0).max(1),
  kvPrev: z.number().min(0).max(1),
  /** Requests in the engine's decode batch, and admitted-but-waiting ones. */
  running: z.number().int().nonnegative(),
  waiting: z.number().int().nonnegative(),
  /**
   * Sequences the engine decodes at once at most (its max running requests, or the agent's
   * `--max-in-flight` when lower); beyond them requests queue. The dp planner's B (issue #49).
   * Optional: engines that do not tell it, and older SDKs, leave it out.
   */
  decodeBatch: z.number().int().positive().optional(),
  /** Trajectories this rollout owns in the partial pool. */
  owned: z.number().int().nonnegative(),
  tokensPerSecond: z.number().nonnegative(),
  /** The last weight version the engine refused to load, while it goes on with the previous one. */
  weightError: z.object({ version, code: z.string().max(64), message: z.string().max(1024) }).nullish(),
  /**
   * Agentic rollouts (multi-turn agents): each owned trajectory's predicted remaining tokens
   * (null: no prediction) and whether it waits at a tool call, holding nothing at the engine
   * (the manager may move it at no cost but a re-prefill), and its context length in tokens (what
   * a move re-prefills; optional: older SDKs leave it out). Optional: single-turn rollouts and
   * older SDKs leave it out; a bad list is dropped, never the heartbeat.
   */
  trajectories: z
    .array(
      z.object({
        id: z.string().min(1).max(512),
        predictedTokens: z.number().nonnegative().nullable(),
        atTool: z.boolean(),
        contextTokens: z.number().int().nonnegative().optional(),
      }),
    )
    .max(MAX_REPORTED_TRAJECTORIES)
    .optional()
    .catch(undefined),
});

const inputSource = z.enum(['flag', 'measured', 'nic', 'default']);
const chunkInputs = z.object({
  bandwidth: z.number().positive(),
  bandwidthSource: inputSource,
  device: z.string().max(64).nullable(),
  chunkCost: z.number().nonnegative(),
  chunkCostSource: inputSource,
});
/** How a relay chunks the versions it lays out, and the chunk model's inputs (ChunkingStatus of the relay's status). */
export const chunkingSchema = chunkInputs.extend({
  mode: z.enum(['auto', 'fixed']),
  chunkSize: z.number().int().positive().nullable(),
  p: z.number().int().positive(),
  measured: z.object({ hops: z.number().int().nonnegative(), bandwidth: z.number().positive().nullable(), chunkCost: z.number().positive().nullable() }),
  last: z
    .object({
      bytes: z.number().int().nonnegative(),
      p: z.number().int().positive(),
      chunkSize: z.number().int().positive(),
      advisedBy: z.string().max(128).nullable(),
      inputs: chunkInputs.nullable(),
    })
    .nullable(),
});

const count = z.number().int().nonnegative();
const deltaCounts = z.object({
  chunks: z.object({ same: count, sparse: count, full: count }),
  fullBytes: count,
  wireBytes: count,
  forwarded: count.optional(),
});
/** A relay's delta broadcast: its --delta mode, chunks and bytes sent and received (DeltaStatus of the relay's status). */
export const deltaSchema = z.object({ mode: z.enum(['auto', 'on', 'off']), out: deltaCounts, in: deltaCounts });

export const heartbeatSchema = z.object({
  v: z.literal(SCHEMA_VERSION),
  t: z.literal('heartbeat'),
  id,
  incarnation,
  seq: z.number().int().nonnegative(),
  epoch: epoch.nullable(),
  holds: z.array(holding).max(1024),
  receiving: z.array(progress).max(1024),
  downstream: id.nullable(),
  rollout: rolloutLoadSchema.optional(),
  /** Relays: their chunking (optional: older relays leave it out; a bad one is dropped, never the heartbeat). */
  chunking: chunkingSchema.optional().catch(undefined),
  /** Relays: the page size of their segments (2097152 or 4096; optional like chunking). */
  pageSize: z
    .number()
    .int()
    .positive()
    .max(1 << 30)
    .optional()
    .catch(undefined),
  /**
   * Relays: chunk bytes sent downstream and received from upstream since the relay started,
   * cumulative (optional like chunking: older relays leave it out, a bad one is dropped).
   */
  bytes: z.object({ sent: z.number().int().nonnegative(), received: z.number().int().nonnegative() }).optional().catch(undefined),
  /** Relays: delta broadcast's mode and counts (DeltaStatus of the relay's status; optional like chunking). */
  delta: deltaSchema.optional().catch(undefined),
});

export const reportSchema = z.object({
  v: z.literal(SCHEMA_VERSION),
  t: z.literal('report'),
  id,
  incarnation,
  epoch,
  peer: id,
  direction: z.enum(['downstream', 'upstream']),
  code: z.string().max(64),
});

export const commandSchema = z.discriminatedUnion('t', [
  z.object({ v: z.literal(SCHEMA_VERSION), t: z.literal('reregister'), reason: z.string() }),
  z.object({ v: z.literal(SCHEMA_VERSION), t: z.literal('load'), model, version, path: z.string().min(1).max(4096) }),
  // Repack (rollouts of one weight version): the source stops and flushes everything it owns (or
  // only `trajectories`: the free moves of trajectories waiting at tool calls), then the
  // destination takes those trajectories over from the partial pool and resumes them.
  z.object({
    v: z.literal(SCHEMA_VERSION),
    t: z.literal('repack-out'),
    repack: z.string().max(64),
    to: id,
    version,
    trajectories: z.array(z.string().min(1).max(512)).max(65536).optional(),
  }),
  z.object({
    v: z.literal(SCHEMA_VERSION),
    t: z.literal('repack-in'),
    repack: z.string().max(64),
    from: id,
    version,
    trajectories: z.array(z.string().min(1).max(512)).max(65536),
  }),
  z.object({ v: z.literal(SCHEMA_VERSION), t: z.literal('update-weights'), model: model.nullable(), version: version.nullable() }),
  z.object({ v: z.literal(SCHEMA_VERSION), t: z.literal('reinitialise'), reason: z.string().max(256) }),
]);

export const commandReplySchema = z.discriminatedUnion('t', [
  z.object({
    v: z.literal(SCHEMA_VERSION),
    t: z.literal('done'),
    moved: z.array(z.string()).max(65536).default([]),
    taken: z.number().int().nonnegative().default(0),
    completed: z.number().int().nonnegative().default(0),
    lost: z.number().int().nonnegative().default(0),
    /**
     * repack-in: trajectories left to their owner's completion (its 'completing' marker younger
     * than the partial pool's grace), each with the time left of that grace: the manager asks again
     * after it, for the record may never come (an owner that died mid-completion).
     */
    completing: z
      .array(z.object({ trajectory: z.string().min(1).max(512), retryAfterMs: z.number().int().nonnegative() }))
      .max(65536)
      .default([]),
  }),
  z.object({ v: z.literal(SCHEMA_VERSION), t: z.literal('failed'), code: z.string().max(64), message: z.string().max(4096) }),
]);

export const planSchema = z.object({
  v: z.literal(SCHEMA_VERSION),
  epoch,
  relays: z.array(z.object({ id, address })).min(1).max(65536),
  manager: z.string(),
  at: z.number(),
});

export const leaseSchema = z.object({ v: z.literal(SCHEMA_VERSION), holder: z.string(), ttlMs: z.number().int().positive(), at: z.number() });

export const memberRecordSchema = registerSchema.omit({ t: true, holds: true }).extend({ registeredAt: z.number(), admittedEpoch: epoch });

export const announceSchema = z.object({ v: z.literal(SCHEMA_VERSION), model, version, checkpoint: z.string().max(4096).nullable(), at: z.number() });

/** A batch handed to a trainer: its trainer version and [staleness, trajectories] pairs. */
export const batchSummarySchema = z.object({
  v: z.literal(SCHEMA_VERSION),
  t: z.literal('batch'),
  buffer: z.string().min(1).max(64),
  trainerVersion: version,
  staleness: z.array(z.tuple([version, z.number().int().positive().max(10_000_000)])).max(4096),
});

/** Where samplers publish their batch summaries (core NATS, not stored). */
export function batchSummarySubject(buffer: string): string {
  return `laminar.expbatch.${buffer}`;
}

export type Register = z.infer<typeof registerSchema>;
export type RegisterReply = z.infer<typeof registerReplySchema>;
export type Heartbeat = z.infer<typeof heartbeatSchema>;
export type Report = z.infer<typeof reportSchema>;
export type Command = z.infer<typeof commandSchema>;
export type CommandReply = z.infer<typeof commandReplySchema>;
export type RolloutLoad = z.infer<typeof rolloutLoadSchema>;
export type PlanRecord = z.infer<typeof planSchema>;
export type Lease = z.infer<typeof leaseSchema>;
export type MemberRecord = z.infer<typeof memberRecordSchema>;
export type Announcement = z.infer<typeof announceSchema>;
export type BatchSummary = z.infer<typeof batchSummarySchema>;
export type Holding = z.infer<typeof holding>;
export type Progress = z.infer<typeof progress>;
export type Chunking = z.infer<typeof chunkingSchema>;
export type DeltaReport = z.infer<typeof deltaSchema>;

export function encode(value: object): Uint8Array {
  return pack(value);
}

/** Decodes and validates; throws ControlError (DECODE, SCHEMA_VERSION or SCHEMA). */
export function decode<S extends z.ZodType>(schema: S, bytes: Uint8Array, what: string): z.infer<S> {
  let raw: unknown;
  try {
    raw = unpack(bytes);
  } catch (err) {
    throw new ControlError(ErrorCodes.CONTROL_DECODE, `${what}: not msgpack (${(err as Error).message})`);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ControlError(ErrorCodes.CONTROL_DECODE, `${what}: not a map`);
  }
  const v = (raw as { v?: unknown }).v;
  if (v !== SCHEMA_VERSION) {
    throw new ControlError(ErrorCodes.CONTROL_SCHEMA_VERSION, `${what}: schema version ${JSON.stringify(v)}, this build speaks ${SCHEMA_VERSION}`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ControlError(ErrorCodes.CONTROL_SCHEMA, `${what}: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid'}`);
  }
  return parsed.data;
}
