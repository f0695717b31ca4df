import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DTYPE_SIZES, type Dtype } from '../../src/safetensors/dtypes.js';
import {
  DATA_ALIGNMENT,
  chunkAlignedParts,
  chunkRange,
  encodeHeader,
  parseHeader,
  planLayout,
  readHeaderLength,
  validateTensorSpecs,
} from '../../src/safetensors/header.js';

const dtypes = Object.keys(DTYPE_SIZES) as Dtype[];
const specArb = fc.uniqueArray(
  fc.record({
    name: fc.string({ minLength: 1, maxLength: 20 }).filter((n) => n !== '__metadata__'),
    dtype: fc.constantFrom(...dtypes),
    shape: fc.array(fc.nat(50), { maxLength: 3 }),
  }),
  { selector: (s) => s.name, minLength: 1, maxLength: 20 },
);

describe('safetensors layout', () => {
  it('lays tensors out contiguously after a page-aligned header, and parses back', () => {
    fc.assert(
      fc.property(specArb, fc.integer({ min: 4096, max: 65536 }), (specs, chunkSize) => {
        const layout = planLayout(specs, { model: 'm/x', version: 3, chunkSize });
        expect(layout.dataOffset % DATA_ALIGNMENT).toBe(0);
        let cursor = layout.dataOffset;
        for (const t of layout.tensors) {
          expect(t.offset).toBe(cursor);
          cursor += t.byteLength;
        }
        expect(cursor).toBe(layout.totalSize);
        const checksums = Array.from({ length: layout.chunkCount }, (_, i) => i.toString(16).padStart(16, 'f'));
        const header = encodeHeader(layout, { model: 'm/x', version: 3, chunkSize, checksums }, { note: 'hi' });
        expect(header.byteLength).toBe(layout.dataOffset);
        const n = readHeaderLength(header, layout.totalSize);
        const parsed = parseHeader(header.subarray(8, 8 + n), layout.totalSize);
        expect(parsed.laminar).toEqual({ model: 'm/x', version: 3, chunkSize, checksums });
        expect({ ...parsed.metadata }).toEqual({ note: 'hi' });
        // The same tensors at the same places. Among empty tensors at one offset the order is not
        // kept: the header is a JSON object, which lists integer-like names ("0") first.
        const placed = (tensors: typeof layout.tensors): [string, number, number][] =>
          tensors
            .map((t): [string, number, number] => [t.name, t.offset, t.byteLength])
            .sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
        expect(placed(parsed.layout.tensors)).toEqual(placed(layout.tensors));
        let covered = 0;
        for (let i = 0; i < layout.chunkCount; i++) covered += chunkRange(layout, i).length;
        expect(covered).toBe(layout.dataLength);
      }),
    );
  });

  it('keeps tensors whose names are Object.prototype keys', () => {
    const specs = ['__proto__', 'constructor', 'toString'].map((name) => ({ name, dtype: 'U8' as const, shape: [3] }));
    const layout = planLayout(specs, { model: 'm', version: 0, chunkSize: 4096 });
    const header = encodeHeader(layout, { model: 'm', version: 0, chunkSize: 4096, checksums: ['0'.repeat(16)] });
    const parsed = parseHeader(header.subarray(8, 8 + readHeaderLength(header, layout.totalSize)), layout.totalSize);
    expect(parsed.layout.tensors.map((t) => t.name)).toEqual(['__proto__', 'constructor', 'toString']);
  });

  it.each([
    [[{ name: 'a', dtype: 'F33', shape: [1] }], 'ERR_BAD_DTYPE'],
    [[{ name: 'a', dtype: 'F32', shape: [-1] }], 'ERR_BAD_SHAPE'],
    [[{ name: 'a', dtype: 'F32', shape: [1.5] }], 'ERR_BAD_SHAPE'],
    [[{ name: 'a', dtype: 'F32', shape: [2 ** 40, 2 ** 40] }], 'ERR_BAD_SHAPE'],
    [[{ name: 'a', dtype: 'F32', shape: 'big' }], 'ERR_BAD_SHAPE'],
    [
      [
        { name: 'a', dtype: 'F32', shape: [1] },
        { name: 'a', dtype: 'F32', shape: [1] },
      ],
      'ERR_DUPLICATE_TENSOR',
    ],
    [[{ name: '', dtype: 'F32', shape: [1] }], 'ERR_BAD_TENSOR'],
    [[{ name: '__metadata__', dtype: 'F32', shape: [1] }], 'ERR_BAD_TENSOR'],
    [[42], 'ERR_BAD_TENSOR'],
    ['nope', 'ERR_BAD_TENSOR'],
  ])('rejects bad tensor list %j', (specs, code) => {
    expect(() => validateTensorSpecs(specs)).toThrow(expect.objectContaining({ code }));
  });

  it('rejects headers whose tensors leave holes, overlap or overrun', () => {
    const enc = (h: unknown): Buffer => Buffer.from(JSON.stringify(h));
    const t = (b: number, e: number) => ({ dtype: 'U8', shape: [e - b], data_offsets: [b, e] });
    const size = (h: Buffer, data: number): number => 8 + h.byteLength + data;
    const hole = enc({ a: t(0, 4), b: t(8, 12) });
    expect(() => parseHeader(hole, size(hole, 12))).toThrow(expect.objectContaining({ code: 'ERR_BAD_SAFETENSORS' }));
    const overlap = enc({ a: t(0, 8), b: t(4, 12) });
    expect(() => parseHeader(overlap, size(overlap, 12))).toThrow(expect.objectContaining({ code: 'ERR_BAD_SAFETENSORS' }));
    const short = enc({ a: t(0, 8) });
    expect(() => parseHeader(short, size(short, 4))).toThrow(expect.objectContaining({ code: 'ERR_BAD_SAFETENSORS' }));
    const wrongSpan = enc({ a: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } });
    expect(() => parseHeader(wrongSpan, size(wrongSpan, 8))).toThrow(expect.objectContaining({ code: 'ERR_BAD_SAFETENSORS' }));
    expect(() => parseHeader(Buffer.from('{not json'), 100)).toThrow(expect.objectContaining({ code: 'ERR_BAD_SAFETENSORS' }));
    const huge = Buffer.alloc(8);
    huge.writeBigUInt64LE(2n ** 40n);
    expect(() => readHeaderLength(huge, 1000)).toThrow(expect.objectContaining({ code: 'ERR_BAD_SAFETENSORS' }));
  });

  it('rejects tampered laminar metadata', () => {
    const layout = planLayout([{ name: 'a', dtype: 'U8', shape: [10000] }], { model: 'm', version: 1, chunkSize: 4096 });
    const header = encodeHeader(layout, { model: 'm', version: 1, chunkSize: 4096, checksums: ['0'.repeat(16), '1'.repeat(16), '2'.repeat(16)] });
    const text = header.toString('latin1').replace('"laminar.chunks":"', '"laminar.chunks":"zz');
    const n = readHeaderLength(header, layout.totalSize);
    expect(() => parseHeader(Buffer.from(text, 'latin1').subarray(8, 8 + n), layout.totalSize)).toThrow(
      expect.objectContaining({ code: 'ERR_BAD_SAFETENSORS' }),
    );
  });
  it('cuts a range at the chunk grid into parts that tile it, one per chunk it spans', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 1, max: 64 }), fc.nat(5000), fc.nat(5000), (pages, chunkSize, begin, length) => {
        const grid = { dataOffset: pages * 4096, chunkSize };
        const offset = grid.dataOffset + begin;
        const parts = chunkAlignedParts(grid, offset, length);
        const chunkOf = (at: number): number => Math.floor((at - grid.dataOffset) / chunkSize);
        if (length === 0) {
          expect(parts).toEqual([{ offset, length: 0 }]);
          return;
        }
        expect(parts.length).toBe(chunkOf(offset + length - 1) - chunkOf(offset) + 1);
        let at = offset;
        for (const [i, part] of parts.entries()) {
          expect(part.offset).toBe(at);
          expect(part.length).toBeGreaterThan(0);
          expect(chunkOf(part.offset)).toBe(chunkOf(offset) + i);
          expect(chunkOf(part.offset + part.length - 1)).toBe(chunkOf(part.offset));
          at += part.length;
        }
        expect(at).toBe(offset + length);
      }),
    );
  });
});
