/**
 * The sparse encoding of a chunk against its base, in plain TypeScript: the reference that the
 * native kernel (native/delta_codec.cc) must match byte for byte.
 *
 * Format 1. A chunk of n bytes is read as floor(n/2) little-endian 16-bit words (a bf16 or fp16
 * element each, when the chunk starts on an element, as a version's chunks do), and, when n is
 * odd, one last byte. A payload is a header and three streams:
 *
 *   payload := 0x01 [last byte, when n is odd] varint(T) varint(E) token[T] escapes[E] literals
 *   token   := byte(gap4 << 4 | delta4)
 *
 * Each token is one changed word, in increasing order: `gap` is the number of unchanged words
 * since the previous changed word (or the chunk's start). gap4 = min(gap, 15); when it is 15,
 * the next varint of the escape stream is gap - 15. delta4 = d + 8 says the new word is the
 * base's plus d, modulo 2^16, for d in [-8, 7] but 0; delta4 = 8 says the new word is the next
 * one of the literal stream (2 bytes, little endian). Varints are unsigned LEB128 of at most
 * VARINT_MAX_BYTES bytes. A decoder rejects a payload whose first byte is not 0x01, whose
 * streams are shorter or longer than its tokens use, or whose token names a word past the end.
 *
 * Why this shape: at RL learning rates a bf16 weight that moves at all moves by a unit or two in
 * the last place (its 16-bit pattern by +-1 or +-2), and the GRPO example's training at lr 1e-6
 * changes 10-19 % of the elements per step, ~10 elements apart: most changes fit one byte, a
 * nibble of gap and a nibble of delta (byte runs with varint headers cost 2.7 bytes per changed
 * element there, these tokens ~1.2; docs/performance/delta.md). The escapes and literals go in
 * streams of their own so that every token sits at a known place: a decoder's next token does
 * not wait on the length of the one before, and the kernel rebuilds at a few cycles a token.
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

function pushVarint(out: number[], value: number): void {
  while (value >= 128) {
    out.push((value % 128) | 128);
    value = Math.floor(value / 128);
  }
  out.push(value);
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
  const headerMin = 1 + (n & 1) + 2; // the two varints take a byte each at least
  const tokens: number[] = [];
  const escapes: number[] = [];
  const literals: number[] = [];
  let previous = -1;
  for (let i = 0; i < words; i++) {
    const a = word(base, i);
    const b = word(next, i);
    if (a === b) continue;
    const gap = i - previous - 1;
    const d = ((b - a) << 16) >> 16; // the signed 16-bit difference
    const literal = d < -8 || d > 7;
    tokens.push((Math.min(gap, GAP_ESCAPE) << 4) | (literal ? LITERAL : d + 8));
    if (gap >= GAP_ESCAPE) pushVarint(escapes, gap - GAP_ESCAPE);
    if (literal) literals.push(b & 255, b >>> 8);
    previous = i;
    if (headerMin + tokens.length + escapes.length + literals.length > limit) return null; // it can only grow
  }
  const header = [SPARSE_FORMAT];
  if (n & 1) header.push(next[n - 1]!);
  pushVarint(header, tokens.length);
  pushVarint(header, escapes.length);
  const size = header.length + tokens.length + escapes.length + literals.length;
  if (size > limit) return null;
  const out = new Uint8Array(size);
  let at = 0;
  for (const stream of [header, tokens, escapes, literals]) {
    out.set(stream, at);
    at += stream.length;
  }
  return out;
}

/** The varint at `at`, which must end before `end`; errors name `errorAt`. */
function readVarint(payload: Uint8Array, at: number, end: number, errorAt: number): { value: number; next: number } {
  let value = 0;
  let scale = 1;
  for (let k = 0; ; k++) {
    if (k === VARINT_MAX_BYTES) throw corrupt(errorAt, `a varint longer than ${VARINT_MAX_BYTES} bytes`);
    if (at + k >= end) throw corrupt(errorAt, 'a varint cut short');
    const b = payload[at + k]!;
    value += (b & 127) * scale;
    scale *= 128;
    if (b < 128) return { value, next: at + k + 1 };
  }
}

/**
 * Reads the tokens of `payload` for a chunk of n bytes, calling `write(index, delta4, at)` for
 * each changed word (at: its literal's payload offset when delta4 is LITERAL); throws
 * ERR_DELTA_CORRUPT where the payload first goes wrong.
 */
function forEachToken(payload: Uint8Array, n: number, write: (index: number, delta4: number, at: number) => void): void {
  if (payload.length === 0) throw corrupt(0, 'an empty payload');
  if (payload[0] !== SPARSE_FORMAT) throw corrupt(0, `unknown sparse format ${payload[0]}`);
  if (n & 1 && payload.length < 2) throw corrupt(1, "the chunk's last byte is missing");
  const words = n >>> 1;
  const countAt = 1 + (n & 1);
  const count = readVarint(payload, countAt, payload.length, countAt);
  const escapeBytes = readVarint(payload, count.next, payload.length, count.next);
  const tokensAt = escapeBytes.next;
  if (count.value + escapeBytes.value > payload.length - tokensAt) {
    throw corrupt(tokensAt, `${payload.length - tokensAt} bytes for ${count.value} tokens and ${escapeBytes.value} escape bytes`);
  }
  const escapesAt = tokensAt + count.value;
  const literalsAt = escapesAt + escapeBytes.value;
  let escape = escapesAt;
  let literal = literalsAt;
  let index = -1;
  for (let k = 0; k < count.value; k++) {
    const tokenAt = tokensAt + k;
    const token = payload[tokenAt]!;
    let gap = token >>> 4;
    if (gap === GAP_ESCAPE) {
      const extra = readVarint(payload, escape, literalsAt, tokenAt);
      gap += extra.value;
      escape = extra.next;
    }
    index += gap + 1;
    if (index >= words) throw corrupt(tokenAt, `a change of word ${index} in a chunk of ${words} words`);
    const delta4 = token & 15;
    if (delta4 === LITERAL) {
      if (literal + 2 > payload.length) throw corrupt(tokenAt, 'the literal stream ends early');
      literal += 2;
    }
    write(index, delta4, literal - 2);
  }
  if (escape !== literalsAt) throw corrupt(escape, `${literalsAt - escape} escape bytes that no token uses`);
  if (literal !== payload.length) throw corrupt(literal, `${payload.length - literal} bytes after the last literal`);
}

/** Throws ERR_DELTA_CORRUPT, with the reason, unless `payload` is well formed for a chunk of n bytes. */
export function checkSparseReference(payload: Uint8Array, n: number): void {
  forEachToken(payload, n, () => {});
}

/**
 * Writes base + payload into out (all of it). Throws ERR_DELTA_CORRUPT, having written nothing,
 * when the payload is malformed. `out` may be `base` itself (only changed words are written).
 */
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
