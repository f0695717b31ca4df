/**
 * The native delta kernel (native/delta_codec.cc) against its TypeScript reference
 * (src/relay/delta/sparse-reference.ts): the same payload byte for byte for any pair of chunks and
 * any limit, the same verdict (and offset) on any payload, the same rebuilt chunk, and a checksum
 * that is the XXH3-64 of what was written.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes, type LaminarError } from '../../src/common/errors.js';
import { checksumBuffer, deltaDecode, deltaEncode } from '../../src/native/index.js';
import { decodeChunkWithChecksum } from '../../src/relay/delta/codec.js';
import { checkSparseReference, decodeSparseReference, encodeSparseReference } from '../../src/relay/delta/sparse-reference.js';

/** A pair of chunks: a base and a new version with changes of every kind the format has. */
const pairArb = fc
  .record({
    // Lengths around the kernel's 16-word (32-byte) blocks and odd ones.
    words: fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 3000 })),
    odd: fc.boolean(),
    seed: fc.integer(),
    density: fc.constantFrom(0, 0.01, 0.1, 0.5, 1),
    spread: fc.constantFrom(1, 8, 300, 40000), // +-spread on the word: small deltas or literals
    lastByte: fc.boolean(),
  })
  .map(({ words, odd, seed, density, spread, lastByte }) => {
    let x = seed | 1;
    const random = (): number => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) / 2 ** 32;
    };
    const n = 2 * words + (odd ? 1 : 0);
    const base = new Uint8Array(n).map(() => Math.floor(random() * 256));
    const next = base.slice();
    for (let i = 0; i < words; i++) {
      if (random() >= density) continue;
      const w = (next[2 * i]! | (next[2 * i + 1]! << 8)) + Math.round((random() - 0.5) * 2 * spread);
      next[2 * i] = w & 255;
      next[2 * i + 1] = (w >> 8) & 255;
    }
    if (odd && lastByte) next[n - 1] = (next[n - 1]! + 1) & 255;
    return { base, next };
  });

/**
 * The kernel's payload, from its scan with the CPU's widest vectors (AVX-512: a block's tokens
 * made together) and from its AVX2 and portable ones (the changed words walked one by one),
 * which must all agree.
 */
function nativeEncode(base: Uint8Array, next: Uint8Array, limit: number): Uint8Array | null {
  const out = new Uint8Array(limit);
  const length = deltaEncode(base, next, out);
  for (const simd of ['avx2', 'portable'] as const) {
    const narrower = new Uint8Array(limit);
    expect(deltaEncode(base, next, narrower, simd)).toBe(length);
    expect(Buffer.from(narrower).equals(Buffer.from(out))).toBe(true);
  }
  return length < 0 ? null : out.subarray(0, length);
}

function referenceVerdict(payload: Uint8Array, n: number): number {
  try {
    checkSparseReference(payload, n);
    return -1;
  } catch (err) {
    return (err as LaminarError).details!.at as number;
  }
}

describe('native delta kernel against the TypeScript reference', () => {
  it('encodes every pair to the same bytes, and gives up at the same limits', () => {
    fc.assert(
      fc.property(pairArb, fc.double({ min: 0, max: 1.2, noNaN: true }), ({ base, next }, fraction) => {
        const full = encodeSparseReference(base, next, Number.MAX_SAFE_INTEGER)!;
        expect(Buffer.from(nativeEncode(base, next, full.length + 16)!).equals(Buffer.from(full))).toBe(true);
        // At the exact length it fits; one byte less it does not; any other limit agrees too.
        expect(nativeEncode(base, next, full.length)).not.toBeNull();
        expect(nativeEncode(base, next, full.length - 1)).toBeNull();
        expect(encodeSparseReference(base, next, full.length - 1)).toBeNull();
        const limit = Math.floor(full.length * fraction);
        const reference = encodeSparseReference(base, next, limit);
        const native = nativeEncode(base, next, limit);
        expect(native === null).toBe(reference === null);
        if (reference && native) expect(Buffer.from(native).equals(Buffer.from(reference))).toBe(true);
      }),
      { numRuns: 400 },
    );
  });

  it('rebuilds the same chunk, out of place and in place, with the checksum of what it wrote', () => {
    fc.assert(
      fc.property(pairArb, ({ base, next }) => {
        const payload = encodeSparseReference(base, next, Number.MAX_SAFE_INTEGER)!;
        const out = new Uint8Array(base.length);
        const sum = deltaDecode('sparse', base, payload, out, true);
        expect(Buffer.from(out).equals(Buffer.from(next))).toBe(true);
        expect(sum).toBe(checksumBuffer(next));
        const inPlace = base.slice();
        expect(deltaDecode('sparse', inPlace, payload, inPlace, false)).toBe(0n);
        expect(Buffer.from(inPlace).equals(Buffer.from(next))).toBe(true);
        const reference = new Uint8Array(base.length);
        decodeSparseReference(base, payload, reference, false);
        expect(Buffer.from(reference).equals(Buffer.from(next))).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('rebuilds the same bytes and checksum with every width of vectors the CPU has', () => {
    // The rebuild decodes 16 tokens at a time with AVX-512 (and applies them with a gather and a
    // scatter), 8 with AVX2, one by one without; each width hashes with its own XXH3 kernel.
    // Chunks here span several 16 KiB blocks.
    const bigPairArb = fc
      .record({ words: fc.integer({ min: 8000, max: 40000 }), seed: fc.integer(), density: fc.constantFrom(0.02, 0.1, 0.3) })
      .map(({ words, seed, density }) => {
        let x = seed | 1;
        const random = (): number => {
          x = (Math.imul(x, 1103515245) + 12345) | 0;
          return (x >>> 8) / 2 ** 24;
        };
        const base = new Uint8Array(2 * words).map(() => Math.floor(random() * 256));
        const next = base.slice();
        // Runs of changes and long unchanged stretches: escapes of one byte and of several.
        for (let i = 0; i < words; i += random() < 0.01 ? 300 : 1) {
          if (random() >= density) continue;
          next[2 * i] = (next[2 * i]! + (random() < 0.9 ? 1 : 77)) & 255;
        }
        return { base, next };
      });
    fc.assert(
      fc.property(fc.oneof(pairArb, bigPairArb), ({ base, next }) => {
        const payload = encodeSparseReference(base, next, Number.MAX_SAFE_INTEGER)!;
        for (const simd of ['avx512', 'avx2', 'portable'] as const) {
          // AVX-512 writes each word as a 32-bit lane with the word after it: never past the chunk.
          const guarded = new Uint8Array(base.length + 8).fill(0xee);
          const out = guarded.subarray(4, 4 + base.length);
          expect(deltaDecode('sparse', base, payload, out, true, simd)).toBe(checksumBuffer(next));
          expect(Buffer.from(out).equals(Buffer.from(next))).toBe(true);
          expect([...guarded.subarray(0, 4), ...guarded.subarray(4 + base.length)]).toEqual(new Array(8).fill(0xee));
        }
      }),
      { numRuns: 200 },
    );
    const invalid = expect.objectContaining({ code: ErrorCodes.INVALID_ARG }) as unknown as Error;
    const chunk = new Uint8Array(4);
    expect(() => deltaDecode('same', chunk, new Uint8Array(0), new Uint8Array(4), false, 'sse9' as 'avx2')).toThrow(invalid);
  });

  it('returns the checksum of same and full chunks as it copies them', () => {
    const base = new Uint8Array(300_001).map((_, i) => i * 31);
    const next = base.map((b) => b ^ 0x5a);
    const out = new Uint8Array(base.length);
    expect(decodeChunkWithChecksum('same', base, new Uint8Array(0), out)).toBe(checksumBuffer(base));
    expect(Buffer.from(out).equals(Buffer.from(base))).toBe(true);
    expect(decodeChunkWithChecksum('full', base, next, out)).toBe(checksumBuffer(next));
    expect(Buffer.from(out).equals(Buffer.from(next))).toBe(true);
    expect(decodeChunkWithChecksum('same', out, new Uint8Array(0), out)).toBe(checksumBuffer(next));
  });

  it('gives the same verdict and offset on any payload, and writes nothing outside the output', () => {
    // Payloads: valid ones, their truncations, single-byte corruptions, and random tokens.
    const payloadArb = fc.oneof(
      fc.tuple(pairArb, fc.nat(), fc.nat(), fc.integer({ min: 0, max: 255 })).map(([{ base, next }, cut, at, value]) => {
        const valid = encodeSparseReference(base, next, Number.MAX_SAFE_INTEGER)!;
        const payload = valid.slice(0, valid.length - (cut % 4));
        if (at % 3 === 0 && payload.length > 0) payload[at % payload.length] = value;
        return { base, payload };
      }),
      fc.tuple(fc.integer({ min: 0, max: 200 }), fc.uint8Array({ maxLength: 60 })).map(([n, tokens]) => ({
        base: new Uint8Array(n).fill(1),
        payload: Uint8Array.from([1, ...tokens]),
      })),
      // A header that counts its streams right, over random tokens, escapes and literals.
      fc
        .tuple(fc.integer({ min: 0, max: 200 }), fc.uint8Array({ maxLength: 40 }), fc.uint8Array({ maxLength: 8 }), fc.uint8Array({ maxLength: 12 }))
        .map(([n, tokens, escapes, literals]) => ({
          base: new Uint8Array(n).fill(1),
          payload: Uint8Array.from([1, ...(n & 1 ? [7] : []), tokens.length, escapes.length, ...tokens, ...escapes, ...literals]),
        })),
    );
    fc.assert(
      fc.property(payloadArb, ({ base, payload }) => {
        const n = base.length;
        const guarded = new Uint8Array(n + 64).fill(0xee);
        const out = guarded.subarray(32, 32 + n);
        const result = deltaDecode('sparse', base, payload, out, true);
        const verdict = referenceVerdict(payload, n);
        if (typeof result === 'number') {
          expect(result).toBe(verdict);
          expect(out.every((b) => b === 0xee)).toBe(true);
        } else {
          expect(verdict).toBe(-1);
          const reference = new Uint8Array(n);
          decodeSparseReference(base, payload, reference, false);
          expect(Buffer.from(out).equals(Buffer.from(reference))).toBe(true);
          expect(result).toBe(checksumBuffer(reference));
        }
        expect(guarded.subarray(0, 32).every((b) => b === 0xee)).toBe(true);
        expect(guarded.subarray(32 + n).every((b) => b === 0xee)).toBe(true);
      }),
      { numRuns: 3000 },
    );
  });

  it('refuses an output that overlaps the payload or part of the base', () => {
    const buffer = new Uint8Array(64);
    const invalid = expect.objectContaining({ code: ErrorCodes.INVALID_ARG }) as unknown as Error;
    expect(() => deltaDecode('sparse', buffer.subarray(0, 16), buffer.subarray(8, 10), buffer.subarray(0, 16), false)).toThrow(invalid);
    expect(() => deltaDecode('same', buffer.subarray(0, 16), new Uint8Array(0), buffer.subarray(4, 20), false)).toThrow(invalid);
    expect(() => deltaEncode(buffer.subarray(0, 16), buffer.subarray(16, 32), buffer.subarray(20, 40))).toThrow(invalid);
  });
});
