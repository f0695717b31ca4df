/**
 * The sampler service's local protocol (version 1): the request protocol's frames (length-prefixed
 * msgpack) and envelope (src/common/request-protocol/), with the sampler's own operations, each
 * validated with zod before it reaches the sampler. docs/reference/protocols.md describes every operation.
 *
 *   client -> service  { id, op, ...args }                 (first: { id, op: 'hello', protocol })
 *   service -> client  { id, ok: true, result }  |  { id, ok: false, error: { code, message, details? } }
 *
 * A batch is handed over as a BatchDescriptor: the shared-memory file it lives in and where each
 * array is in it (batch-layout.ts). The client maps the file and reads it in place.
 *
 * Fields are only ever added to a descriptor within a protocol version, and a client ignores the
 * ones it does not know (`lossMask` and `segments` came with multi-turn trajectories): the
 * version changes only when a field a client reads changes meaning or goes away.
 */
import { join } from 'node:path';
import { z } from 'zod';
import type { StalenessSummary } from '../experience/batch.js';
import type { ColumnInfo } from './batch-layout.js';
import type { WireSegment } from '../codec/segments.js';

export const SAMPLER_PROTOCOL_VERSION = 1;

/** Where the service listens when nobody says: beside the relay's socket, one per buffer. */
export function defaultSamplerSocket(shmDir: string, buffer: string): string {
  return join(shmDir, `sampler-${buffer}.sock`);
}

export const samplerRequestSchemas = {
  hello: z.object({ protocol: z.number().int(), client: z.string().max(200).optional() }),
  sample: z.object({
    timeoutMs: z
      .number()
      .nonnegative()
      .max(24 * 3600 * 1000)
      .optional(),
  }),
  release: z.object({ batch: z.number().int().nonnegative() }),
  setTrainerVersion: z.object({ version: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER) }),
  // `trajectory`, not `id`: `id` is the request's.
  updatePriority: z.object({ trajectory: z.string().min(1).max(1024), priority: z.number().nonnegative() }),
  stats: z.object({}),
} as const;

export type SamplerOp = keyof typeof samplerRequestSchemas;
export type SamplerRequest<O extends SamplerOp> = z.infer<(typeof samplerRequestSchemas)[O]>;

export interface HelloResult {
  protocol: number;
  /** Changes every time the service starts: a batch of another instance is gone with it. */
  instance: string;
  buffer: string;
  batchSize: number;
  trainerVersion: number;
  maxFrameBytes: number;
}

/** A region of the arena file: `count` elements from byte `offset`. */
export interface ArrayRegion {
  offset: number;
  count: number;
}

/** What sample() answers: a batch in a shared-memory file, and its metadata. */
export interface BatchDescriptor {
  /** Id for release (unique within the service instance). */
  batch: number;
  instance: string;
  /** The arena file (map it read-only; it stays valid until release). */
  path: string;
  /** Size of the file. */
  fileBytes: number;
  /** Items in the batch. */
  count: number;
  /** Every item's tokens, packed in item order (int32). */
  tokens: ArrayRegion;
  /** Every item's logprobs, in the same order and at the same indices as `tokens` (float32). */
  logprobs: ArrayRegion;
  /**
   * Every item's loss mask, at the same indices as `tokens` (uint8: 1 generated, 0 prompt and
   * observation tokens). Absent from a service before multi-turn trajectories.
   */
  lossMask: ArrayRegion;
  /** Per-item numeric columns, each `count` long, little endian. */
  columns: ColumnInfo[];
  ids: string[];
  promptIds: string[];
  groupIds: string[];
  rolloutIds: Array<string | null>;
  infos: Array<Record<string, string | number | boolean> | null>;
  /** Per item: its segments in the record's wire form (segments.ts), or null for a single-turn one. */
  segments: Array<WireSegment[] | null>;
  trainerVersion: number;
  staleness: StalenessSummary;
  /** Group ids in the batch, in order of first appearance. */
  groups: string[];
  /** Payload bytes (tokens and logprobs). */
  bytes: number;
  prefetched: boolean;
}
