/**
 * The chunk delta codec (src/relay/delta): byte-exact reconstruction over chains of versions with
 * random and structured changes, the choice of encoding, and malformed payloads refused with
 * ERR_DELTA_CORRUPT without a byte written, inside or outside the output.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes, LaminarError } from '../../src/common/errors.js';
import { Mapping, checksumBuffer } from '../../src/native/index.js';
import { decodeChunk, encodeChunk, encodeMappedChunk, maxSparsePayloadBytes, rebuildMappedChunk, type ChunkEncodingKind } from '../../src/relay/delta/codec.js';
import { encodeSparseReference } from '../../src/relay/delta/sparse-reference.js';

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

  it('sends a bf16 nudge as one byte: a nibble of gap and a nibble of delta', () => {
    const base = new Uint8Array(1 << 16).map((_, i) => (i * 7919) & 255);
    const next = base.slice();
    for (let i = 0; i < next.length; i += 20) next[i] = next[i]! ^ 1; // the low byte of every tenth element
    const { kind, payload } = encodeChunk(base, next);
    expect(kind).toBe('sparse');
    const tokens = Math.ceil(next.length / 20); // 3277: a varint of 2 bytes
    expect(Array.from(payload.subarray(0, 4))).toEqual([1, (tokens % 128) | 128, tokens >> 7, 0]);
    expect(payload.length).toBe(4 + tokens);
    expect(payload[4]).toBe(0x00 | (next[0]! - base[0]! + 8)); // word 0, gap 0
    expect(payload[5]! >> 4).toBe(9); // nine unchanged words before word 10
  });

  it('escapes long gaps as a varint, large deltas as the word itself, and carries an odd last byte', () => {
    const base = new Uint8Array(2 * 300 + 1);
    const next = base.slice();
    next[2 * 3] = 7; // word 3: +7, gap 3
    next[2 * 4 + 1] = 1; // word 4: +256, a literal, gap 0
    next[2 * 200] = 0xff; // word 200: +255 is a literal too (-1 would not be: 0xffff - 0 = -1)
    next[2 * 299] = 0xff;
    next[2 * 299 + 1] = 0xff; // word 299: 0xffff - 0 = -1, gap 98
    next[600] = 9; // the odd last byte
    const { kind, payload } = encodeChunk(base, next);
    expect(kind).toBe('sparse');
    // [format, last byte, 4 tokens, 3 escape bytes]
    // tokens [gap 3, +7] [gap 0, literal] [gap 15 + escape, literal] [gap 15 + escape, -1]
    // escapes [180 as a varint] [83]; literals [0x0100] [0x00ff]
    expect(Array.from(payload)).toEqual([1, 9, 4, 3, 0x3f, 0x08, 0xf8, 0xf7, 180, 1, 83, 0x00, 0x01, 0xff, 0x00]);
    const out = new Uint8Array(next.length);
    decodeChunk(kind, base, payload, out);
    expect(Buffer.from(out).equals(Buffer.from(next))).toBe(true);
  });

  it('goes full when the sparse payload would not be smaller, or passes maxSparseFraction', () => {
    const base = new Uint8Array(1000);
    const next = base.slice().fill(1); // every word +257: a literal token each, larger than the chunk
    expect(encodeChunk(base, next).kind).toBe('full');
    const literals = base.map((_, i) => i & 1); // +256 in every word: 3 bytes each
    expect(encodeChunk(base, literals).kind).toBe('full');
    const few = base.slice();
    for (let i = 0; i < 1000; i += 20) few[i] = 1; // 50 tokens of one byte and a header of 3
    expect(encodeChunk(base, few).payload.length).toBe(53);
    expect(encodeChunk(base, few, { maxSparseFraction: 0.052 }).kind).toBe('full');
    expect(encodeChunk(base, few, { maxSparseFraction: 0.053 }).kind).toBe('sparse');
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
    untouched([2]); // unknown format
    expect(untouched([1, 0x80]).details).toMatchObject({ at: 1 }); // the token count cut short
    untouched([1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0]); // a varint of 8 bytes
    expect(untouched([1, 1]).details).toMatchObject({ at: 2 }); // no escape byte count
    expect(untouched([1, 2, 0, 0x79]).details).toMatchObject({ at: 3 }); // 2 tokens, 1 byte
    expect(untouched([1, 1, 0, 0xf0]).details).toMatchObject({ at: 3 }); // an escape, none in its stream
    untouched([1, 1, 7, 0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]); // a gap of 2^49 + 14 words
    untouched([1, 1, 0, 0x80]); // word 8 of 8
    expect(untouched([1, 2, 0, 0x70, 0x09]).details).toMatchObject({ at: 4 }); // word 7, then word 8
    expect(untouched([1, 2, 0, 0x09, 0x08, 0x01]).details).toMatchObject({ at: 4 }); // the literal stream short
    expect(untouched([1, 1, 1, 0x79, 5]).details).toMatchObject({ at: 4 }); // an escape byte no token uses
    expect(untouched([1, 1, 0, 0x79, 5]).details).toMatchObject({ at: 4 }); // a byte after the literals
    const odd = new Uint8Array(5).fill(3);
    expectCorrupt(() => decodeChunk('sparse', odd, Uint8Array.from([1]), odd)); // the odd last byte missing
    expect(Array.from(odd)).toEqual([3, 3, 3, 3, 3]);
    untouched([1], 'same');
    untouched(new Array<number>(15).fill(0), 'full');
    expectCorrupt(() => decodeChunk('delta' as ChunkEncodingKind, base, new Uint8Array(0), out));
    // A well-formed payload rebuilds: the last word of the chunk, +1.
    decodeChunk('sparse', base, Uint8Array.from([1, 1, 0, 0x79]), out);
    expect(Array.from(out.subarray(12))).toEqual([7, 7, 8, 7]);
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

  it('encodes and rebuilds chunks of mappings on the pool as the reference does, hashing what it writes', async () => {
    // Two versions laid side by side in one mapping, the rebuild written into another at an odd offset.
    const source = new Mapping(null, { size: 2 * 4096 });
    const target = new Mapping(null, { size: 4096 + 3, writable: true });
    try {
      await fc.assert(
        fc.asyncProperty(chunkArb, stepArb, fc.integer(), async (first, step, seed) => {
          const n = first.length;
          const next = apply(first, step, seed);
          new Uint8Array(source.view(0, 2 * 4096)).set(first, 0);
          new Uint8Array(source.view(0, 2 * 4096)).set(next, 4096);
          const encoded = await encodeMappedChunk({ mapping: source, offset: 0 }, { mapping: source, offset: 4096 }, n);
          const reference = encodeChunk(first, next);
          expect(encoded.kind).toBe(reference.kind);
          if (encoded.kind === 'sparse') expect(Buffer.from(encoded.payload).equals(Buffer.from(encodeSparseReference(first, next, n - 1)!))).toBe(true);
          if (encoded.kind === 'full') return;
          new Uint8Array(target.view(0, target.size)).fill(0xee);
          const sum = await rebuildMappedChunk(encoded.kind, { mapping: source, offset: 0 }, encoded.payload, { mapping: target, offset: 3 }, n);
          expect(Buffer.from(target.view(3, n)).equals(Buffer.from(next))).toBe(true);
          expect(sum).toBe(checksumBuffer(next));
          expect(new Uint8Array(target.view(0, 3)).every((b) => b === 0xee)).toBe(true);
          expect(new Uint8Array(target.view(3 + n, target.size - 3 - n)).every((b) => b === 0xee)).toBe(true);
        }),
        { numRuns: 200 },
      );
      // A payload that does not decode is refused, nothing written; the reason is the reference's.
      new Uint8Array(target.view(0, target.size)).fill(0xee);
      const refused = await rebuildMappedChunk(
        'sparse',
        { mapping: source, offset: 0 },
        Uint8Array.from([1, 2, 0, 0x79]),
        { mapping: target, offset: 0 },
        16,
      ).then(
        () => null,
        (err: unknown) => err as LaminarError,
      );
      expect(refused?.code).toBe(ErrorCodes.DELTA_CORRUPT);
      expect(refused?.details).toMatchObject({ at: 3 });
      expect(new Uint8Array(target.view(0, target.size)).every((b) => b === 0xee)).toBe(true);
    } finally {
      source.close();
      target.close();
    }
  });
});
