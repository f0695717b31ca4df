/**
 * The relay's local protocol: every request, validated with zod before it reaches the store.
 * Version 1. Frames and the request/response envelope are the request protocol's
 * (src/common/request-protocol/); docs/reference/protocols.md lists every operation.
 *
 *   client -> relay   { id, op, ...args }                 (first: { id, op: 'hello', protocol })
 *   relay  -> client  { id, ok: true, result }  |  { id, ok: false, error: { code, message, details? } }
 *   relay  -> client  { event: 'version', watch, ... }  |  { event: 'progress', id, done, total }
 */
import { z } from 'zod';

export const PROTOCOL_VERSION = 1;

const model = z.string();
const version = z.number();

const tensorSpec = z.object({ name: z.unknown(), dtype: z.unknown(), shape: z.unknown() }).loose();

export const requestSchemas = {
  hello: z.object({ protocol: z.number().int(), client: z.string().max(200).optional() }),
  begin: z.object({
    model,
    version,
    tensors: z.array(tensorSpec).max(1_000_000),
    metadata: z.record(z.string(), z.string()).optional(),
    chunkSize: z.number().int().optional(),
    // A LoRA adapter version of a base held here (src/relay/lora/); `config` is adapter_config.json's text.
    lora: z
      .object({
        baseModel: z.string(),
        baseVersion: z.number().int().nonnegative().optional(),
        // Any value: the relay's check names what is wrong with it (ERR_LORA_BAD_CONFIG).
        config: z.unknown(),
      })
      .optional(),
  }),
  attach: z.object({ segment: z.string() }),
  written: z.object({
    model,
    version,
    tensors: z
      .array(
        z.object({
          name: z.string(),
          checksum: z.string().nullable().optional(),
          // Or one checksum per pieceSize bytes of the tensor (parallel writers).
          pieceSize: z.number().int().positive().optional(),
          pieces: z.array(z.string()).max(1_000_000).optional(),
          // Or one checksum per part of the tensor in each chunk it spans (chunkAlignedParts):
          // commit checks those in the read that computes the chunk checksums.
          chunkAligned: z.boolean().optional(),
        }),
      )
      .max(1_000_000),
  }),
  commit: z.object({ model, version }),
  abort: z.object({ model, version }),
  adopt: z.object({ model, version, path: z.string().min(1).max(4096), chunkSize: z.number().int().optional() }),
  acquire: z.object({
    model,
    version: version.optional(),
    atLeast: version.optional(),
    timeoutMs: z
      .number()
      .nonnegative()
      .max(24 * 3600 * 1000)
      .optional(),
  }),
  release: z.object({ lease: z.number().int() }),
  watch: z.object({ model: model.optional(), replay: z.boolean().optional() }),
  unwatch: z.object({ watch: z.number().int() }),
  status: z.object({}),
  // A chain plan for the broadcast (validated again by the broadcast module); newer epochs only.
  plan: z.object({ plan: z.unknown() }),
} as const;

export type Op = keyof typeof requestSchemas;
export type Request<O extends Op> = z.infer<(typeof requestSchemas)[O]>;

/** What acquire, begin and attach return about a version's layout. */
export interface TensorInfo {
  name: string;
  dtype: string;
  shape: number[];
  offset: number;
  byteLength: number;
}

export interface SegmentDescription {
  model: string;
  version: number;
  segment: string;
  path: string;
  /**
   * The version's directory, `<shm-dir>/models/<model>/v<N>/` (model.safetensors and the engine
   * files), for engines that load a directory. Exists from the moment the version is complete
   * until it is retired (never while a lease on it lives); null while the version is being
   * written (begin, attach) and when the relay could not make it.
   */
  dir: string | null;
  size: number;
  dataOffset: number;
  chunkSize: number;
  tensors: TensorInfo[];
  metadata: Record<string, string>;
  checksums: string[] | null;
}

export interface AcquireResult extends SegmentDescription {
  lease: number;
}

export interface VersionEvent {
  event: 'version';
  watch: number;
  model: string;
  version: number;
  size: number;
  segment: string;
}

export interface ProgressEvent {
  event: 'progress';
  id: number;
  done: number;
  total: number;
}
