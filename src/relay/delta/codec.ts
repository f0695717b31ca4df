/**
 * Chunk deltas between two versions of one model with the same layout: each chunk of version N
 * goes as whichever of three encodings is smallest against the receiver's base version B:
 * - 'same': the chunk equals B's (no payload);
 * - 'sparse': the 16-bit words that differ, as small tokens (format in ./sparse-reference.ts);
 * - 'full': the chunk itself.
 * The caller verifies a rebuilt chunk against version N's own checksums (src/relay/chunk-checksums.ts):
 * the codec checks the payload's shape, never its content. The work is native (native/delta_codec.cc);
 * ./sparse-reference.ts is the same codec in TypeScript, which the tests hold the native one to.
 */
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import { deltaDecode, deltaEncode, deltaEncodeAsync, deltaRebuildAsync, type Mapping } from '../../native/index.js';
import { checkSparseReference, corrupt, sameBytes } from './sparse-reference.js';

export type ChunkEncodingKind = 'same' | 'sparse' | 'full';

export interface EncodedChunk {
  kind: ChunkEncodingKind;
  /** 'same': empty; 'full': the chunk itself (a view, not a copy); 'sparse': the tokens. */
  payload: Uint8Array;
}

export interface EncodeOptions {
  /**
   * The largest sparse payload accepted, as a fraction of the chunk (0..1, default 1: any
   * payload smaller than the chunk). A sender whose link is fast may lower it: decoding a
   * payload of half a chunk saves half the bytes but costs the receiver more than a copy.
   */
  maxSparseFraction?: number;
}

const EMPTY = new Uint8Array(0);

function sameLength(base: Uint8Array, other: Uint8Array, what: string): void {
  if (base.length !== other.length) {
    throw new LaminarError(ErrorCodes.INVALID_ARG, `the base chunk has ${base.length} bytes and ${what} ${other.length}`);
  }
}

/** The largest sparse payload the codec accepts for a chunk of `chunkBytes`, under maxSparseFraction. */
function sparseLimit(chunkBytes: number, maxSparseFraction: number): number {
  return Math.min(chunkBytes - 1, Math.floor(chunkBytes * maxSparseFraction));
}

/**
 * The native encoder's output, reused: a payload is copied out at its own length, so that a
 * chunk that barely changed does not keep a chunk-sized buffer alive.
 */
let scratch = new Uint8Array(0);

function checkedFraction(options: EncodeOptions): number {
  const fraction = options.maxSparseFraction ?? 1;
  if (!(fraction >= 0 && fraction <= 1)) {
    throw new LaminarError(ErrorCodes.INVALID_ARG, `maxSparseFraction must be within [0, 1], not ${fraction}`);
  }
  return fraction;
}

/** Chooses the smallest encoding of `next` against `base` (same length). */
export function encodeChunk(base: Uint8Array, next: Uint8Array, options: EncodeOptions = {}): EncodedChunk {
  sameLength(base, next, 'the new one');
  const fraction = checkedFraction(options);
  if (sameBytes(base, next)) return { kind: 'same', payload: EMPTY };
  const limit = sparseLimit(next.length, fraction);
  if (limit > 0) {
    if (scratch.length < limit) scratch = new Uint8Array(limit);
    const length = deltaEncode(base, next, scratch.subarray(0, limit));
    if (length >= 0) return { kind: 'sparse', payload: scratch.slice(0, length) };
  }
  return { kind: 'full', payload: next };
}

/** Whether two views are the same bytes (in place), and never a partial overlap. */
function isInPlace(base: Uint8Array, out: Uint8Array): boolean {
  if (base.buffer !== out.buffer) return false;
  if (base.byteOffset === out.byteOffset) return true;
  const apart = base.byteOffset + base.length <= out.byteOffset || out.byteOffset + out.length <= base.byteOffset;
  if (!apart) throw new LaminarError(ErrorCodes.INVALID_ARG, 'the output chunk overlaps the base chunk without being it');
  return false;
}

/** The payload's shape for its kind, checked in TypeScript: the reason a native refusal had. */
function checkPayload(kind: ChunkEncodingKind, payload: Uint8Array, chunkBytes: number): void {
  switch (kind) {
    case 'same':
      if (payload.length !== 0) throw corrupt(0, `a 'same' chunk with a payload of ${payload.length} bytes`);
      return;
    case 'full':
      if (payload.length !== chunkBytes) throw corrupt(0, `a 'full' payload of ${payload.length} bytes for a chunk of ${chunkBytes}`);
      return;
    case 'sparse':
      checkSparseReference(payload, chunkBytes);
      return;
    default:
      throw corrupt(0, `unknown chunk encoding ${JSON.stringify(kind)}`);
  }
}

function decode(kind: ChunkEncodingKind, base: Uint8Array, payload: Uint8Array, out: Uint8Array, checksum: boolean): bigint {
  sameLength(base, out, 'the output');
  isInPlace(base, out);
  const result = deltaDecode(kind, base, payload, out, checksum);
  if (typeof result === 'bigint') return result;
  checkPayload(kind, payload, out.length); // throws with the reason
  throw corrupt(result, 'refused by the native decoder'); // the two disagree: a bug, but never served
}

/**
 * Writes the chunk into `out` (same length as base) from base + payload. Throws ERR_DELTA_CORRUPT
 * on a malformed payload, having written nothing; never reads or writes out of bounds. `out` may
 * be `base` itself: the chunk is then rebuilt in place (only the changed words are written).
 */
export function decodeChunk(kind: ChunkEncodingKind, base: Uint8Array, payload: Uint8Array, out: Uint8Array): void {
  decode(kind, base, payload, out, false);
}

/**
 * decodeChunk, and the XXH3-64 of the rebuilt chunk (the algorithm of the version's chunk
 * checksums, see checksumHex) computed as it is written: the verification costs no second read.
 */
export function decodeChunkWithChecksum(kind: ChunkEncodingKind, base: Uint8Array, payload: Uint8Array, out: Uint8Array): bigint {
  return decode(kind, base, payload, out, true);
}

/** A chunk of a mapping: `length` bytes at `offset`. */
export interface MappedChunk {
  mapping: Mapping;
  offset: number;
}

/**
 * encodeChunk over chunks of two mappings, on the libuv pool (the relay's event loop never scans
 * a chunk); also the encode's own time on its thread, for the sender's measurements. A 'full'
 * chunk's payload is a view of `next`.
 */
export async function encodeMappedChunk(
  base: MappedChunk,
  next: MappedChunk,
  length: number,
  options: EncodeOptions = {},
): Promise<EncodedChunk & { seconds: number }> {
  const limit = Math.max(0, sparseLimit(length, checkedFraction(options)));
  const encoded = await deltaEncodeAsync(base.mapping, base.offset, next.mapping, next.offset, length, limit);
  if (encoded.kind === 'sparse') return { kind: 'sparse', payload: encoded.payload!, seconds: encoded.seconds };
  if (encoded.kind === 'same') return { kind: 'same', payload: EMPTY, seconds: encoded.seconds };
  return { kind: 'full', payload: new Uint8Array(next.mapping.view(next.offset, length)), seconds: encoded.seconds };
}

/**
 * Writes `target`'s chunk from `base`'s and a 'same' or 'sparse' payload, on the libuv pool, in
 * one pass that also hashes it: resolves with the XXH3-64 of the rebuilt chunk (what the caller
 * compares with the version's checksum). Rejects with ERR_DELTA_CORRUPT, having written nothing,
 * when the payload is malformed.
 */
export async function rebuildMappedChunk(
  kind: 'same' | 'sparse',
  base: MappedChunk,
  payload: Uint8Array,
  target: MappedChunk,
  length: number,
): Promise<bigint> {
  const result = await deltaRebuildAsync(kind, base.mapping, base.offset, payload, target.mapping, target.offset, length);
  if (typeof result === 'bigint') return result;
  checkPayload(kind, payload, length); // throws with the reason
  throw corrupt(result, 'refused by the native decoder');
}

/**
 * Upper bound of a sparse payload for a chunk of `chunkBytes`, so that a receiver can size its
 * staging buffers: encodeChunk sends a sparse payload only when it is smaller than the chunk.
 */
export function maxSparsePayloadBytes(chunkBytes: number): number {
  return Math.max(0, chunkBytes - 1);
}
