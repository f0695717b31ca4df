/**
 * The metadata of a stored trajectory, carried in the `Laminar-Meta` header of its record
 * message as base64(msgpack) with a version field. The sampler indexes records from headers
 * alone (a headers-only consumer), so rebuilding the index never transfers payloads.
 *
 * Version 2 adds `segments` (a multi-turn trajectory's turns and observations, in their wire
 * form: segments.ts). A trajectory without segments is still written as version 1, byte for
 * byte as before, so that a reader from before segments reads every single-turn record; a v1
 * record reads as one generated segment.
 */
import { pack, unpack } from 'msgpackr';
import { z } from 'zod';
import type { Trajectory } from './trajectory.js';
import { ACTION_STATUSES, segmentsFromWire, segmentsToWire, type TrajectorySegment } from './segments.js';

export const META_HEADER = 'Laminar-Meta';
/** The newest record version: what a record with segments is written as. */
export const RECORD_VERSION = 2;
/** What a record without segments is written as (readable by every reader). */
export const SINGLE_TURN_RECORD_VERSION = 1;

/** The trajectory without its payload, plus what the sampler needs to fetch the payload. */
export type RecordMeta = Omit<Trajectory, 'tokens' | 'logprobs' | 'priority'> & {
  v: number;
  tokenCount: number;
  priority: number;
  segments?: TrajectorySegment[];
  /** Payload bytes (tokens + logprobs). */
  bytes: number;
  /** Empty: the payload is the record's body; else the stream sequences of its chunks, in order. */
  chunkSeqs: number[];
};

const count = z.number().int().nonnegative();
const wireSegment = z.union([
  z.tuple([z.literal(0), count, count, z.string()]),
  z.tuple([z.literal(1), count, z.string(), z.string(), z.enum(ACTION_STATUSES as [string, ...string[]]), z.number().nonnegative()]),
]);

const metaSchema = z.object({
  v: z.union([z.literal(SINGLE_TURN_RECORD_VERSION), z.literal(RECORD_VERSION)]),
  id: z.string(),
  promptId: z.string(),
  groupId: z.string(),
  sampleIndex: z.number().int().nonnegative(),
  groupSize: z.number().int().positive(),
  weightVersion: z.number().int().nonnegative(),
  reward: z.number(),
  tokenCount: z.number().int().nonnegative(),
  promptLength: z.number().int().nonnegative(),
  responseLength: z.number().int().nonnegative(),
  createdAt: z.number(),
  completedAt: z.number(),
  rolloutId: z.string().optional(),
  priority: z.number().nonnegative(),
  info: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).optional(),
  segments: z.array(wireSegment).optional(),
  bytes: z.number().int().nonnegative(),
  chunkSeqs: z.array(z.number().int().positive()),
});

export function metaOf(t: Trajectory, chunkSeqs: number[]): RecordMeta {
  return {
    v: t.segments === undefined ? SINGLE_TURN_RECORD_VERSION : RECORD_VERSION,
    id: t.id,
    promptId: t.promptId,
    groupId: t.groupId,
    sampleIndex: t.sampleIndex,
    groupSize: t.groupSize,
    weightVersion: t.weightVersion,
    reward: t.reward,
    tokenCount: t.tokens.length,
    promptLength: t.promptLength,
    responseLength: t.responseLength,
    createdAt: t.createdAt,
    completedAt: t.completedAt,
    rolloutId: t.rolloutId,
    priority: t.priority ?? 1,
    info: t.info,
    segments: t.segments,
    bytes: t.tokens.byteLength + t.logprobs.byteLength,
    chunkSeqs,
  };
}

export function encodeMeta(meta: RecordMeta): string {
  // msgpackr writes undefined as nil; drop the absent optionals so that the schema accepts it.
  const clean = Object.fromEntries(
    Object.entries<unknown>(meta)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => (k === 'segments' ? [k, segmentsToWire(v as TrajectorySegment[])] : [k, v])),
  );
  return Buffer.from(pack(clean)).toString('base64');
}

/**
 * Decodes and validates; throws on anything that is not a v1 or v2 record (counted as corrupt),
 * a v1 record with segments and a v2 record without included.
 */
export function decodeMeta(header: string): RecordMeta {
  const { segments, ...meta } = metaSchema.parse(unpack(Buffer.from(header, 'base64')));
  if ((segments !== undefined) !== (meta.v === RECORD_VERSION)) {
    throw new RangeError(`a version ${meta.v} record ${segments === undefined ? 'without' : 'with'} segments`);
  }
  if (segments === undefined) return meta;
  // Key order as written (segments before bytes), so that re-encoding gives the same bytes.
  const { bytes, chunkSeqs, ...rest } = meta;
  return { ...rest, segments: segmentsFromWire(segments as Parameters<typeof segmentsFromWire>[0]), bytes, chunkSeqs };
}
