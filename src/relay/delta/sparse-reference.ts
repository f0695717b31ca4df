/**
 * The sparse encoding of a chunk against its base, in plain TypeScript: the reference that the
 * native kernel (native/delta_codec.cc) must match byte for byte.
 *
 * Format 1. A chunk of n bytes is read as floor(n/2) little-endian 16-bit words (a bf16 or fp16
 * element each, when the chunk starts on an element, as a version's chunks do), and, when n is
 * odd, one last byte:
 *
 *   payload := 0x01 [last byte, when n is odd] token*
 *   token   := byte(gap4 << 4 | delta4) [varint(gap - 15), when gap4 = 15] [word, when delta4 = 8]
 *
 * Each token is one changed word, in increasing order: `gap` is the number of unchanged words
 * since the previous changed word (or the chunk's start); gap4 = min(gap, 15). delta4 = d + 8
 * says the new word is the base's plus d, modulo 2^16, for d in [-8, 7] but 0; delta4 = 8
 * gives the new word itself (2 bytes, little endian). Varints are unsigned LEB128 of at most
 * VARINT_MAX_BYTES bytes. A decoder rejects a payload whose first byte is not 0x01, that ends
 * inside a token, or whose token names a word past the chunk's end.
 *
 * Why: at RL learning rates a bf16 weight that moves at all moves by a unit or two in the last
 * place (its 16-bit pattern by +-1 or +-2), and the GRPO example's training at lr 1e-6 changes
 * 10-19 % of the elements per step, ~10 elements apart: most changes fit one byte (a nibble of
 * gap, a nibble of delta). Measured in docs/performance/delta.md: byte runs with varint headers
 * cost 2.7 bytes per changed element there, these tokens ~1.15.
 */
import { ErrorCodes, LaminarError } from '../../common/errors.js';

export const SPARSE_FORMAT = 1;
/** 7 bytes of 7 bits: word indices up to 2^49, far beyond any chunk, and no overflow in 64 bits. */
export const VARINT_MAX_BYTES = 7;
/** gap4 value meaning "15 or more: the rest follows as a varint". */
const GAP_ESCAPE = 15;
/** delta4 value meaning "the new word follows". */
const LITERAL = 8;

export function corrupt(at: number, reason: string): LaminarError {
  return new LaminarError(ErrorCodes.DELTA_CORRUPT, `malformed sparse delta at payload byte ${at}: ${reason}`, { details: { at, reason } });
}

/** A growable output, so that a chunk that barely changed does not allocate a chunk's worth. */
class Output {
  bytes: Uint8Array;
  length = 0;
  constructor(capacity: number) {
    this.bytes = new Uint8Array(Math.max(16, Math.min(capacity, 4096)));
  }
  /** Room for `more` bytes, or false when that would pass `limit`. */
  reserve(more: number, limit: number): boolean {
    if (this.length + more > limit) return false;
    if (this.length + more <= this.bytes.length) return true;
    const grown = new Uint8Array(Math.min(limit, Math.max(this.length + more, this.bytes.length * 2)));
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
    return true;
  }
  byte(value: number): void {
    this.bytes[this.length++] = value;
  }
  varint(value: number): void {
    while (value >= 128) {
      this.bytes[this.length++] = (value % 128) | 128;
      value = Math.floor(value / 128);
    }
    this.bytes[this.length++] = value;
  }
}

function varintBytes(value: number): number {
  let bytes = 1;
  for (; value >= 128; bytes++) value = Math.floor(value / 128);
  return bytes;
}

function word(bytes: Uint8Array, i: number): number {
  return bytes[2 * i]! | (bytes[2 * i + 1]! << 8);
}

/** Whether the two chunks hold the same bytes. */
export function sameBytes(base: Uint8Array, next: Uint8Array): boolean {
  return Buffer.from(base.buffer, base.byteOffset, base.length).equals(Buffer.from(next.buffer, next.byteOffset, next.length));
}

/**
 * The sparse payload of `next` against `base` (same length), or null when it would be longer
 * than `limit` bytes.
 */
export function encodeSparseReference(base: Uint8Array, next: Uint8Array, limit: number): Uint8Array | null {
  const n = next.length;
  const words = n >>> 1;
  const out = new Output(limit);
  if (!out.reserve(1 + (n & 1), limit)) return null;
  out.byte(SPARSE_FORMAT);
  if (n & 1) out.byte(next[n - 1]!);
  let previous = -1;
  for (let i = 0; i < words; i++) {
    const a = word(base, i);
    const b = word(next, i);
    if (a === b) continue;
    const gap = i - previous - 1;
    const d = ((b - a) << 16) >> 16; // the signed 16-bit difference
    const literal = d < -8 || d > 7;
    const size = 1 + (gap >= GAP_ESCAPE ? varintBytes(gap - GAP_ESCAPE) : 0) + (literal ? 2 : 0);
    if (!out.reserve(size, limit)) return null;
    out.byte((Math.min(gap, GAP_ESCAPE) << 4) | (literal ? LITERAL : d + 8));
    if (gap >= GAP_ESCAPE) out.varint(gap - GAP_ESCAPE);
    if (literal) {
      out.byte(b & 255);
      out.byte(b >>> 8);
    }
    previous = i;
  }
  return out.bytes.subarray(0, out.length);
}

/**
 * Reads the tokens of `payload` for a chunk of n bytes, calling `write(index, delta4, at)` for
 * each changed word (at: the literal's payload offset when delta4 is LITERAL); throws
 * ERR_DELTA_CORRUPT on the first malformed token.
 */
function forEachToken(payload: Uint8Array, n: number, write: (index: number, delta4: number, at: number) => void): void {
  if (payload.length === 0) throw corrupt(0, 'an empty payload');
  if (payload[0] !== SPARSE_FORMAT) throw corrupt(0, `unknown sparse format ${payload[0]}`);
  if (n & 1 && payload.length < 2) throw corrupt(1, "the chunk's last byte is missing");
  const words = n >>> 1;
  let at = 1 + (n & 1);
  let index = -1;
  while (at < payload.length) {
    const tokenAt = at;
    const token = payload[at++]!;
    let gap = token >>> 4;
    if (gap === GAP_ESCAPE) {
      let extra = 0;
      let scale = 1;
      for (let k = 0; ; k++) {
        if (k === VARINT_MAX_BYTES) throw corrupt(tokenAt, `a varint longer than ${VARINT_MAX_BYTES} bytes`);
        if (at >= payload.length) throw corrupt(tokenAt, 'the payload ends inside a varint');
        const b = payload[at++]!;
        extra += (b & 127) * scale;
        scale *= 128;
        if (b < 128) break;
      }
      gap += extra;
    }
    index += gap + 1;
    if (index >= words) throw corrupt(tokenAt, `a change of word ${index} in a chunk of ${words} words`);
    const delta4 = token & 15;
    if (delta4 === LITERAL) {
      if (at + 2 > payload.length) throw corrupt(tokenAt, 'the payload ends inside a literal word');
      at += 2;
    }
    write(index, delta4, at - 2);
  }
}

/**
 * Writes base + payload into out (all of it). Throws ERR_DELTA_CORRUPT, having written nothing,
 * when the payload is malformed. `out` may be `base` itself (only changed words are written).
 */
/** Throws ERR_DELTA_CORRUPT, with the reason, unless `payload` is well formed for a chunk of n bytes. */
export function checkSparseReference(payload: Uint8Array, n: number): void {
  forEachToken(payload, n, () => {});
}

export function decodeSparseReference(base: Uint8Array, payload: Uint8Array, out: Uint8Array, inPlace: boolean): void {
  const n = out.length;
  checkSparseReference(payload, n); // the whole payload checked before anything is written
  if (!inPlace) out.set(base);
  if (n & 1) out[n - 1] = payload[1]!;
  forEachToken(payload, n, (index, delta4, at) => {
    const value = delta4 === LITERAL ? payload[at]! | (payload[at + 1]! << 8) : word(out, index) + delta4 - 8;
    out[2 * index] = value & 255;
    out[2 * index + 1] = (value >>> 8) & 255;
  });
}
