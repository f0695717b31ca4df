/**
 * The sparse encoding of a chunk against its base, in plain TypeScript: the reference that the
 * native kernel (native/delta_codec.cc) must match byte for byte, and the fallback where it is
 * not loaded.
 *
 * Format (version 1), for a chunk of n bytes:
 *
 *   payload := 0x01 run*
 *   run     := varint(gap) varint(length - 1) byte[length]
 *
 * A run says: skip `gap` bytes (kept from the base) after the end of the previous run (or from
 * the chunk's start), then write these `length` bytes. Every byte not in a run is the base's.
 * Varints are unsigned LEB128, at most VARINT_MAX_BYTES bytes. A decoder rejects a payload whose
 * first byte is not 0x01, whose varint or run bytes are cut short, or whose run ends past n.
 *
 * Why this shape: at RL learning rates a bf16 weight that moves at all moves by one or two units
 * in the last place, so most changed elements differ only in their low byte and sit alone among
 * unchanged ones. Byte runs make such an element cost 3-4 bytes (gap, length, the byte) rather than
 * 5 for 2-byte words, without assuming a dtype (chunks cut across tensors of any dtype). The
 * encoder joins two runs when the unchanged bytes between them are at most MERGE_GAP: carrying them
 * costs no more than a new run's header (two varints, two bytes at least), and fewer runs decode
 * faster. Measured on real training in docs/performance/delta.md.
 */
import { ErrorCodes, LaminarError } from '../../common/errors.js';

export const SPARSE_FORMAT = 1;
/** Unchanged bytes between two changed ones that the encoder carries inside one run. */
export const MERGE_GAP = 2;
/** 7 bytes of 7 bits: offsets up to 2^49, far beyond any chunk, and no overflow in 64 bits. */
export const VARINT_MAX_BYTES = 7;

export function corrupt(at: number, reason: string): LaminarError {
  return new LaminarError(ErrorCodes.DELTA_CORRUPT, `malformed sparse delta at payload byte ${at}: ${reason}`, { details: { at, reason } });
}

function varintBytes(value: number): number {
  let bytes = 1;
  while (value >= 128) {
    value = Math.floor(value / 128);
    bytes++;
  }
  return bytes;
}

/** A growable output, so that a chunk that barely changed does not allocate a chunk's worth. */
class Output {
  bytes: Uint8Array;
  length = 1;
  constructor(capacity: number) {
    this.bytes = new Uint8Array(Math.max(16, Math.min(capacity, 4096)));
    this.bytes[0] = SPARSE_FORMAT;
  }
  reserve(more: number): void {
    if (this.length + more <= this.bytes.length) return;
    const grown = new Uint8Array(Math.max(this.length + more, this.bytes.length * 2));
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
  }
  varint(value: number): void {
    while (value >= 128) {
      this.bytes[this.length++] = (value % 128) | 128;
      value = Math.floor(value / 128);
    }
    this.bytes[this.length++] = value;
  }
}

/** The first index in [from, n) where the two differ, or n. */
function firstDifference(base: Uint8Array, next: Uint8Array, from: number): number {
  const n = next.length;
  let i = from;
  // Four bytes at a time where both views allow 32-bit reads: most of a chunk is unchanged.
  if (((base.byteOffset + i) & 3) === 0 && ((next.byteOffset + i) & 3) === 0) {
    const words = (n - i) >>> 2;
    if (words > 0) {
      const a = new Uint32Array(base.buffer, base.byteOffset + i, words);
      const b = new Uint32Array(next.buffer, next.byteOffset + i, words);
      let w = 0;
      while (w < words && a[w] === b[w]) w++;
      i += w * 4;
    }
  }
  while (i < n && base[i] === next[i]) i++;
  return i;
}

/**
 * The sparse payload of `next` against `base` (same length), or null when it would be longer
 * than `limit` bytes; a payload of one byte (no runs) means the two are equal.
 */
export function encodeSparseReference(base: Uint8Array, next: Uint8Array, limit: number): Uint8Array | null {
  const n = next.length;
  if (limit < 1) return null;
  const out = new Output(limit);
  let covered = 0; // end of the previous run
  for (;;) {
    const start = firstDifference(base, next, covered);
    if (start === n) break;
    let end = start + 1;
    for (;;) {
      let j = end;
      while (j < n && j - end <= MERGE_GAP && base[j] === next[j]) j++;
      if (j === n || j - end > MERGE_GAP) break;
      end = j + 1;
      // Two varints of a byte at least follow: give up as soon as the payload must pass the limit.
      if (out.length + 2 + (end - start) > limit) return null;
    }
    const gap = start - covered;
    const length = end - start;
    const size = varintBytes(gap) + varintBytes(length - 1) + length;
    if (out.length + size > limit) return null;
    out.reserve(size);
    out.varint(gap);
    out.varint(length - 1);
    out.bytes.set(next.subarray(start, end), out.length);
    out.length += length;
    covered = end;
  }
  return out.bytes.subarray(0, out.length);
}

interface Run {
  start: number;
  at: number;
  length: number;
}

/** The varint at `at`; errors name `runAt`, the start of the run it belongs to. */
function readVarint(payload: Uint8Array, at: number, runAt: number): { value: number; next: number } {
  let value = 0;
  let scale = 1;
  for (let k = 0; k < VARINT_MAX_BYTES; k++) {
    if (at + k >= payload.length) throw corrupt(runAt, 'the payload ends inside a varint');
    const b = payload[at + k]!;
    value += (b & 127) * scale;
    if (b < 128) return { value, next: at + k + 1 };
    scale *= 128;
  }
  throw corrupt(runAt, `a varint longer than ${VARINT_MAX_BYTES} bytes`);
}

/** Every run of a sparse payload for a chunk of n bytes, checked before anything is written. */
function parseRuns(payload: Uint8Array, n: number): Run[] {
  if (payload.length === 0) throw corrupt(0, 'an empty payload');
  if (payload[0] !== SPARSE_FORMAT) throw corrupt(0, `unknown sparse format ${payload[0]}`);
  const runs: Run[] = [];
  let at = 1;
  let covered = 0;
  while (at < payload.length) {
    const runAt = at;
    const gap = readVarint(payload, at, runAt);
    const length = readVarint(payload, gap.next, runAt);
    const start = covered + gap.value;
    const count = length.value + 1;
    if (start + count > n) throw corrupt(runAt, `a run of ${count} bytes at ${start} ends past the chunk's ${n} bytes`);
    if (length.next + count > payload.length) throw corrupt(runAt, `the payload ends inside a run of ${count} bytes`);
    runs.push({ start, at: length.next, length: count });
    at = length.next + count;
    covered = start + count;
  }
  return runs;
}

/**
 * Writes base + payload into out (all of it). Throws ERR_DELTA_CORRUPT, having written nothing,
 * when the payload is malformed. `out` may be `base` itself (runs are then written in place).
 */
export function decodeSparseReference(base: Uint8Array, payload: Uint8Array, out: Uint8Array, inPlace: boolean): void {
  const runs = parseRuns(payload, out.length);
  if (!inPlace) out.set(base);
  for (const run of runs) out.set(payload.subarray(run.at, run.at + run.length), run.start);
}
