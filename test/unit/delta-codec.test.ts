/**
 * The chunk delta codec (src/relay/delta): byte-exact reconstruction over chains of versions with
 * random and structured changes, the choice of encoding, and malformed payloads refused with
 * ERR_DELTA_CORRUPT without a byte written, inside or outside the output.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes, LaminarError } from '../../src/common/errors.js';
import { decodeChunk, encodeChunk, maxSparsePayloadBytes, type ChunkEncodingKind } from '../../src/relay/delta/codec.js';
import { MERGE_GAP } from '../../src/relay/delta/sparse-reference.js';

/** One change from a version to the next. */
type Change =
  | { type: 'nudge'; at: number; by: number } // a bf16 element moved by a few units in the last place
  | { type: 'run'; at: number; bytes: Uint8Array } // a stretch rewritten
  | { type: 'byte'; at: number; value: number };

const changeArb: fc.Arbitrary<Change> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ type: fc.constant('nudge' as const), at: fc.nat(), by: fc.integer({ min: -3, max: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('run' as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 300 }) }) },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('byte' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }) },
);

/** A version step: a few changes, or none, or (rarely) a whole new chunk. */
const stepArb = fc.oneof(
  { weight: 8, arbitrary: fc.array(changeArb, { maxLength: 40 }) },
  { weight: 1, arbitrary: fc.constant<Change[] | 'rewrite'>('rewrite') },
);

function apply(previous: Uint8Array, step: Change[] | 'rewrite', seed: number): Uint8Array {
  const next = previous.slice();
  const n = next.length;
  if (n === 0) return next;
  if (step === 'rewrite') {
    let x = seed | 1;
    for (let i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      next[i] = x & 255;
    }
    return next;
  }
  for (const change of step) {
    if (change.type === 'nudge') {
      const at = (change.at % n) & ~1;
      if (at + 1 >= n) continue;
      const word = (next[at]! | (next[at + 1]! << 8)) + change.by;
      next[at] = word & 255;
      next[at + 1] = (word >> 8) & 255;
    } else if (change.type === 'run') {
      const at = change.at % n;
      next.set(change.bytes.subarray(0, n - at), at);
    } else {
      next[change.at % n] = change.value;
    }
  }
  return next;
}

/** A view of `bytes` at byte offset `shift` of a larger buffer, to exercise unaligned reads. */
function shifted(bytes: Uint8Array, shift: number): Uint8Array {
  const buffer = new Uint8Array(bytes.length + shift);
  buffer.set(bytes, shift);
  return buffer.subarray(shift);
}

/** A bf16-like chunk: small weights, so that nudges stay in the low byte mostly. */
const chunkArb = fc.oneof(
  fc.uint8Array({ maxLength: 4000 }),
  fc.array(fc.integer({ min: 0x3c00, max: 0x3d00 }), { maxLength: 2000 }).map((words) => {
    const bytes = new Uint8Array(words.length * 2);
    words.forEach((w, i) => {
      bytes[2 * i] = w & 255;
      bytes[2 * i + 1] = w >> 8;
    });
    return bytes;
  }),
);

function expectCorrupt(fn: () => void): LaminarError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(LaminarError);
    expect((err as LaminarError).code).toBe(ErrorCodes.DELTA_CORRUPT);
    return err as LaminarError;
  }
  throw new Error('expected ERR_DELTA_CORRUPT, nothing was thrown');
}

function checkEncoding(base: Uint8Array, next: Uint8Array, kind: ChunkEncodingKind, payload: Uint8Array): void {
  const equal = Buffer.compare(Buffer.from(base), Buffer.from(next)) === 0;
  expect(kind === 'same').toBe(equal);
  if (kind === 'same') expect(payload.length).toBe(0);
  if (kind === 'sparse') expect(payload.length).toBeLessThanOrEqual(maxSparsePayloadBytes(next.length));
  if (kind === 'full') expect(payload).toBe(next);
}

describe('delta codec', () => {
  it('rebuilds every version of a chain byte for byte, out of place and in place', () => {
    fc.assert(
      fc.property(chunkArb, fc.array(stepArb, { minLength: 1, maxLength: 8 }), fc.nat(3), fc.integer(), (first, steps, shift, seed) => {
        let previous = shifted(first, shift);
        const inPlace = previous.slice(); // rebuilt version after version in one buffer
        for (const step of steps) {
          const next = shifted(apply(previous, step, seed), (shift + 1) & 3);
          const { kind, payload } = encodeChunk(previous, next);
          checkEncoding(previous, next, kind, payload);
          const out = new Uint8Array(next.length).fill(0xa5);
          decodeChunk(kind, previous, payload, out);
          expect(Buffer.from(out).equals(Buffer.from(next))).toBe(true);
          decodeChunk(kind, inPlace, payload, inPlace);
          expect(Buffer.from(inPlace).equals(Buffer.from(next))).toBe(true);
          previous = next;
        }
      }),
      { numRuns: 300 },
    );
  });

  it('sends a sparse payload for a few bf16 nudges, and a smaller one than the chunk', () => {
    const base = new Uint8Array(1 << 16).map((_, i) => (i * 7919) & 255);
    const next = base.slice();
    for (let i = 0; i < next.length; i += 200) next[i] ^= 1; // one low byte in a hundred elements
    const { kind, payload } = encodeChunk(base, next);
    expect(kind).toBe('sparse');
    // 328 runs of one byte with a gap of 199 (two varint bytes) and a length byte: 4 bytes each.
    expect(payload.length).toBe(1 + 4 * Math.ceil(next.length / 200) - 1);
  });

  it(`carries up to ${MERGE_GAP} unchanged bytes inside a run, and not more`, () => {
    const base = new Uint8Array(32);
    const near = base.slice();
    near[4] = 1;
    near[4 + MERGE_GAP + 1] = 1;
    const joined = encodeChunk(base, near).payload;
    expect(Array.from(joined)).toEqual([1, 4, MERGE_GAP + 1, 1, ...new Array<number>(MERGE_GAP).fill(0), 1]);
    const far = base.slice();
    far[4] = 1;
    far[4 + MERGE_GAP + 2] = 1;
    expect(Array.from(encodeChunk(base, far).payload)).toEqual([1, 4, 0, 1, MERGE_GAP + 1, 0, 1]);
  });

  it('goes full when the sparse payload would not be smaller, or passes maxSparseFraction', () => {
    const base = new Uint8Array(1000);
    const next = base.slice().fill(1); // one run of the whole chunk and its header: larger than the chunk
    expect(encodeChunk(base, next).kind).toBe('full');
    const alternate = base.map((_, i) => i & 1); // every other byte: one run too, gaps of one carried
    expect(encodeChunk(base, alternate).kind).toBe('full');
    const few = base.slice();
    for (let i = 0; i < 1000; i += 50) few[i] = 1; // 20 runs of 3 bytes: 61 bytes
    expect(encodeChunk(base, few).kind).toBe('sparse');
    expect(encodeChunk(base, few, { maxSparseFraction: 0.06 }).kind).toBe('full');
    expect(encodeChunk(base, few, { maxSparseFraction: 0.07 }).kind).toBe('sparse');
    expect(encodeChunk(base, base.slice(), { maxSparseFraction: 0 }).kind).toBe('same');
    expect(encodeChunk(new Uint8Array(0), new Uint8Array(0)).kind).toBe('same');
    expect(encodeChunk(new Uint8Array([1]), new Uint8Array([2])).kind).toBe('full');
  });

  it('refuses chunks of different lengths and fractions outside [0, 1] as ERR_INVALID_ARG', () => {
    const code = (fn: () => unknown): unknown => {
      try {
        fn();
      } catch (err) {
        return (err as LaminarError).code;
      }
      return undefined;
    };
    expect(code(() => encodeChunk(new Uint8Array(4), new Uint8Array(5)))).toBe(ErrorCodes.INVALID_ARG);
    expect(code(() => encodeChunk(new Uint8Array(4), new Uint8Array(4), { maxSparseFraction: 1.5 }))).toBe(ErrorCodes.INVALID_ARG);
    expect(code(() => encodeChunk(new Uint8Array(4), new Uint8Array(4), { maxSparseFraction: Number.NaN }))).toBe(ErrorCodes.INVALID_ARG);
    expect(code(() => decodeChunk('same', new Uint8Array(4), new Uint8Array(0), new Uint8Array(3)))).toBe(ErrorCodes.INVALID_ARG);
    const shared = new Uint8Array(8);
    expect(code(() => decodeChunk('same', shared.subarray(0, 4), new Uint8Array(0), shared.subarray(2, 6)))).toBe(ErrorCodes.INVALID_ARG);
  });

  it('refuses malformed payloads with ERR_DELTA_CORRUPT and writes nothing', () => {
    const base = new Uint8Array(16).fill(7);
    const out = new Uint8Array(16).fill(9);
    const untouched = (payload: number[], kind: ChunkEncodingKind = 'sparse'): LaminarError => {
      const err = expectCorrupt(() => decodeChunk(kind, base, Uint8Array.from(payload), out));
      expect(out.every((b) => b === 9)).toBe(true);
      return err;
    };
    expect(untouched([]).details).toMatchObject({ at: 0 });
    untouched([2, 0, 0, 1]); // unknown format
    untouched([1, 0x80]); // a varint cut short
    untouched([1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0]); // a varint of 8 bytes
    untouched([1, 0, 3, 1, 2]); // a run of 4 bytes with 2 of them
    untouched([1, 15, 1, 1, 2]); // a run of 2 bytes at 15 in a chunk of 16
    untouched([1, 0, 0, 5, 16, 0, 5]); // the second run starts past the end
    untouched([1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 5]); // a gap of 2^49 - 1
    expect(untouched([1, 0, 0, 5, 1]).details).toMatchObject({ at: 4 }); // a header with no length
    untouched([1], 'same');
    untouched(new Array<number>(15).fill(0), 'full');
    expectCorrupt(() => decodeChunk('delta' as ChunkEncodingKind, base, new Uint8Array(0), out));
    // A well-formed payload rebuilds: the last run ends exactly at the chunk's end.
    decodeChunk('sparse', base, Uint8Array.from([1, 14, 1, 1, 2]), out);
    expect(Array.from(out.subarray(13))).toEqual([7, 1, 2]);
  });

  it('either rebuilds or refuses any payload, never touching a byte outside the output', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.uint8Array({ maxLength: 40 }), fc.boolean(), (base, tail, prefix) => {
        // Random runs after the format byte, and prefixes of a valid payload (truncations).
        const next = base.map((b, i) => (i % 5 === 0 ? b ^ 0x40 : b));
        const valid = encodeChunk(base, next).payload;
        const payload = prefix ? valid.subarray(0, tail.length % (valid.length + 1)) : Uint8Array.from([1, ...tail]);
        const guarded = new Uint8Array(base.length + 32).fill(0xee);
        const out = guarded.subarray(16, 16 + base.length);
        try {
          decodeChunk('sparse', base, payload, out);
        } catch (err) {
          expect((err as LaminarError).code).toBe(ErrorCodes.DELTA_CORRUPT);
          expect(out.every((b) => b === 0xee)).toBe(true);
        }
        expect(guarded.subarray(0, 16).every((b) => b === 0xee)).toBe(true);
        expect(guarded.subarray(16 + base.length).every((b) => b === 0xee)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });
});
