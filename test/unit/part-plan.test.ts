/** The pure plan of a version published in parts (src/relay/parts/part-plan.ts). */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chunkRange, planLayout, type TensorSpec } from '../../src/safetensors/header.js';
import { checkRuns, chunkSumsFromPieces, packedBytes, packedPlaces, parsePartOf, partPieces, runIndices, tensorRuns } from '../../src/relay/parts/part-plan.js';

const specs = (sizes: number[]): TensorSpec[] => sizes.map((n, i) => ({ name: `t${i}`, dtype: 'U8', shape: [n] }));

describe('part plan', () => {
  it('the parts of any split tile the data section in pieces inside chunks, packed in order', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 20_000 }), { minLength: 1, maxLength: 20 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 1000 }),
        (sizes, parts, seed) => {
          const layout = planLayout(specs(sizes), { model: 'm', version: 1, chunkSize: 4096 });
          const owner = sizes.map((_, i) => (i * 7 + seed) % parts);
          const covered: { offset: number; length: number }[] = [];
          for (let p = 0; p < parts; p++) {
            const held = layout.tensors.filter((_, i) => owner[i] === p);
            if (held.length === 0) continue;
            const runs = tensorRuns(layout, held);
            checkRuns(runs, layout.tensors.length);
            expect(runIndices(runs)).toEqual(layout.tensors.flatMap((_, i) => (owner[i] === p ? [i] : [])));
            const pieces = partPieces(layout, runs);
            let packed = 0;
            for (const piece of pieces) {
              expect(piece.packed).toBe(packed);
              packed += piece.length;
              const chunk = Math.floor((piece.offset - layout.dataOffset) / layout.chunkSize);
              const range = chunkRange(layout, chunk);
              expect(piece.offset + piece.length).toBeLessThanOrEqual(range.offset + range.length);
              covered.push(piece);
            }
            expect(packedBytes(pieces)).toBe(held.reduce((n, t) => n + t.byteLength, 0));
            // A tensor's packed place lies where its bytes are among the pieces.
            const places = packedPlaces(layout, runs);
            for (const [index, place] of places) {
              const t = layout.tensors[index]!;
              if (t.byteLength === 0) continue;
              const piece = pieces.find((pc) => pc.offset <= t.offset && t.offset < pc.offset + pc.length)!;
              expect(place.packed).toBe(piece.packed + (t.offset - piece.offset));
            }
          }
          covered.sort((a, b) => a.offset - b.offset);
          let at = layout.dataOffset;
          for (const piece of covered) {
            expect(piece.offset).toBe(at);
            at += piece.length;
          }
          expect(at).toBe(layout.dataOffset + layout.dataLength);
        },
      ),
    );
  });

  it('a chunk one piece fills takes its checksum; chunks where parts meet are read', () => {
    const layout = planLayout(specs([4096 * 2 + 100, 4096 - 100]), { model: 'm', version: 1, chunkSize: 4096 });
    const a = partPieces(layout, tensorRuns(layout, [layout.tensors[0]!]));
    const b = partPieces(layout, tensorRuns(layout, [layout.tensors[1]!]));
    const sums = chunkSumsFromPieces(
      layout,
      [...a, ...b].map((p, i) => ({ ...p, sum: String(i).padStart(16, '0') })),
    );
    expect(sums).toEqual(['0'.repeat(16), '1'.padStart(16, '0'), null]);
  });

  it('refuses tensors the manifest lacks or has otherwise, and runs out of order', () => {
    const layout = planLayout(specs([10, 10]), { model: 'm', version: 1, chunkSize: 4096 });
    expect(() => tensorRuns(layout, [{ name: 'x', dtype: 'U8', shape: [10] }])).toThrow(expect.objectContaining({ code: 'ERR_UNKNOWN_TENSOR' }));
    expect(() => tensorRuns(layout, [{ name: 't0', dtype: 'U8', shape: [11] }])).toThrow(expect.objectContaining({ code: 'ERR_BAD_TENSOR' }));
    expect(() =>
      checkRuns(
        [
          [1, 1],
          [0, 1],
        ],
        2,
      ),
    ).toThrow(expect.objectContaining({ code: 'ERR_BAD_REQUEST' }));
    expect(() => checkRuns([[0, 3]], 2)).toThrow(expect.objectContaining({ code: 'ERR_BAD_REQUEST' }));
    expect(parsePartOf('2/4')).toEqual({ index: 1, count: 4 });
    expect(() => parsePartOf('5/4')).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
  });
});
