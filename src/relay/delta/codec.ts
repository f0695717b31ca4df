/**
 * Chunk deltas between two versions of one model with the same layout: each chunk of version N
 * goes as whichever of three encodings is smallest against the receiver's base version B:
 * - 'same': the chunk equals B's (no payload);
 * - 'sparse': the 16-bit words that differ, as small tokens (format in ./sparse-reference.ts);
 * - 'full': the chunk itself.
 * The caller verifies a rebuilt chunk against version N's own checksums (src/relay/chunk-checksums.ts):
 * the codec checks the payload's shape, never its content.
 */
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import { corrupt, decodeSparseReference, encodeSparseReference, sameBytes } from './sparse-reference.js';

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

/** Chooses the smallest encoding of `next` against `base` (same length). */
export function encodeChunk(base: Uint8Array, next: Uint8Array, options: EncodeOptions = {}): EncodedChunk {
  sameLength(base, next, 'the new one');
  const fraction = options.maxSparseFraction ?? 1;
  if (!(fraction >= 0 && fraction <= 1)) {
    throw new LaminarError(ErrorCodes.INVALID_ARG, `maxSparseFraction must be within [0, 1], not ${fraction}`);
  }
  if (sameBytes(base, next)) return { kind: 'same', payload: EMPTY };
  const limit = sparseLimit(next.length, fraction);
  const payload = limit > 0 ? encodeSparseReference(base, next, limit) : null;
  if (payload !== null) return { kind: 'sparse', payload };
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

/**
 * Writes the chunk into `out` (same length as base) from base + payload. Throws ERR_DELTA_CORRUPT
 * on a malformed payload, having written nothing; never reads or writes out of bounds. `out` may
 * be `base` itself: the chunk is then rebuilt in place (only the changed bytes are written).
 */
export function decodeChunk(kind: ChunkEncodingKind, base: Uint8Array, payload: Uint8Array, out: Uint8Array): void {
  sameLength(base, out, 'the output');
  const inPlace = isInPlace(base, out);
  switch (kind) {
    case 'same':
      if (payload.length !== 0) throw corrupt(0, `a 'same' chunk with a payload of ${payload.length} bytes`);
      if (!inPlace) out.set(base);
      return;
    case 'full':
      if (payload.length !== out.length) throw corrupt(0, `a 'full' payload of ${payload.length} bytes for a chunk of ${out.length}`);
      out.set(payload);
      return;
    case 'sparse':
      decodeSparseReference(base, payload, out, inPlace);
      return;
    default:
      throw corrupt(0, `unknown chunk encoding ${JSON.stringify(kind)}`);
  }
}

/**
 * Upper bound of a sparse payload for a chunk of `chunkBytes`, so that a receiver can size its
 * staging buffers: encodeChunk sends a sparse payload only when it is smaller than the chunk.
 */
export function maxSparsePayloadBytes(chunkBytes: number): number {
  return Math.max(0, chunkBytes - 1);
}
