/**
 * The metadata of a stored trajectory, carried in the `Laminar-Meta` header of its record
 * message as base64(msgpack) with a version field. The sampler indexes records from headers
 * alone (a headers-only consumer), so rebuilding the index never transfers payloads.
 */
import { pack, unpack } from 'msgpackr';
import { z } from 'zod';
import type { Trajectory } from './trajectory.js';

export const META_HEADER = 'Laminar-Meta';
export const RECORD_VERSION = 1;

/** The trajectory without its payload, plus what the sampler needs to fetch the payload. */
export type RecordMeta = Omit<Trajectory, 'tokens' | 'logprobs' | 'priority'> & {
  v: number;
  tokenCount: number;
  priority: number;
  /** Payload bytes (tokens + logprobs). */
  bytes: number;
  /** Empty: the payload is the record's body; else the stream sequences of its chunks, in order. */
  chunkSeqs: number[];
};

const metaSchema = z.object({
  v: z.literal(RECORD_VERSION),
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
  bytes: z.number().int().nonnegative(),
  chunkSeqs: z.array(z.number().int().positive()),
});

export function metaOf(t: Trajectory, chunkSeqs: number[]): RecordMeta {
  return {
    v: RECORD_VERSION,
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
    bytes: t.tokens.byteLength + t.logprobs.byteLength,
    chunkSeqs,
  };
}

export function encodeMeta(meta: RecordMeta): string {
  // msgpackr writes undefined as nil; drop the absent optionals so that the schema accepts it.
  const clean = Object.fromEntries(Object.entries<unknown>(meta).filter(([, v]) => v !== undefined));
  return Buffer.from(pack(clean)).toString('base64');
}

/** Decodes and validates; throws on anything that is not a v1 record (counted as corrupt). */
export function decodeMeta(header: string): RecordMeta {
  return metaSchema.parse(unpack(Buffer.from(header, 'base64')));
}
