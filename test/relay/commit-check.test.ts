import { describe, expect, it } from 'vitest';
import { Mapping, checksumBuffer, checksumHex } from '../../src/native/index.js';
import { checkPublication, type WriterPiece } from '../../src/relay/commit-check.js';
import { chunkChecksums } from '../../src/relay/chunk-checksums.js';
import { chunkAlignedParts, planLayout } from '../../src/safetensors/header.js';

const CHUNK = 4096;

/** A version of tensors of the given sizes in an anonymous mapping, filled with a pattern. */
function version(sizes: number[]): { mapping: Mapping; layout: ReturnType<typeof planLayout>; bytes: Uint8Array } {
  const layout = planLayout(
    sizes.map((n, i) => ({ name: `t${i}`, dtype: 'U8' as const, shape: [n] })),
    { model: 'm', version: 1, chunkSize: CHUNK },
  );
  const mapping = new Mapping(null, { size: layout.totalSize });
  const bytes = new Uint8Array(mapping.view(0, layout.totalSize));
  for (let i = layout.dataOffset; i < bytes.length; i++) bytes[i] = (i * 31) % 253;
  return { mapping, layout, bytes };
}

const sum = (bytes: Uint8Array, offset: number, length: number): string => checksumHex(checksumBuffer(bytes.subarray(offset, offset + length)));

describe('commit check: chunk checksums and writer checksums in one read', () => {
  // Tensors that share chunks, one that spans several, an empty one and one on the last chunk's tail.
  const sizes = [100, 5000, 3 * CHUNK + 17, 0, 2000, 1];

  it('yields the chunk checksums and accepts matching pieces, chunk-aligned or not', async () => {
    const { mapping, layout, bytes } = version(sizes);
    const aligned = layout.tensors.map((t): [string, WriterPiece[]] => [
      t.name,
      chunkAlignedParts(layout, t.offset, t.byteLength).map((p) => ({ ...p, sum: sum(bytes, p.offset, p.length) })),
    ]);
    // Whole-tensor checksums: the pieces of t1 and t2 straddle chunks and are read on their own.
    const whole = layout.tensors.map((t): [string, WriterPiece[]] => [
      t.name,
      [{ offset: t.offset, length: t.byteLength, sum: sum(bytes, t.offset, t.byteLength) }],
    ]);
    const expected = await chunkChecksums(mapping, layout, 2);
    for (const reports of [aligned, whole, layout.tensors.map((t): [string, null] => [t.name, null])]) {
      const check = await checkPublication(mapping, layout, reports, 3);
      expect(check.checksums).toEqual(expected);
      expect([...check.mismatched]).toEqual([]);
    }
    expect((await checkPublication(mapping, layout, aligned, 3)).bytesRead).toBe(layout.dataLength);
    const straddled = layout.tensors[1]!.byteLength + layout.tensors[2]!.byteLength;
    expect((await checkPublication(mapping, layout, whole, 3)).bytesRead).toBe(layout.dataLength + straddled);
    mapping.close();
  });

  it('names exactly the tensors whose bytes changed after their writer checksummed them', async () => {
    const { mapping, layout, bytes } = version(sizes);
    const reports = layout.tensors.map((t): [string, WriterPiece[]] => [
      t.name,
      chunkAlignedParts(layout, t.offset, t.byteLength).map((p) => ({ ...p, sum: sum(bytes, p.offset, p.length) })),
    ]);
    const [t0, t1, t2, , t4, t5] = layout.tensors;
    bytes[t2!.offset + 2 * CHUNK + 5]! ^= 1; // inside t2, in a chunk t2 fills alone
    bytes[t4!.offset + t4!.byteLength - 1]! ^= 1; // t4's last byte, in a chunk shared with t5
    const check = await checkPublication(mapping, layout, reports, 2);
    expect([...check.mismatched].sort()).toEqual([t2!.name, t4!.name]);
    // The chunk checksums are those of the bytes as they are now.
    expect(check.checksums).toEqual(await chunkChecksums(mapping, layout, 2));
    // A straddling (whole-tensor) piece is checked too, and a wrong empty one.
    bytes[t1!.offset + 4500]! ^= 1;
    const loose: [string, WriterPiece[]][] = [
      [t0!.name, reports[0]![1]],
      [t1!.name, [{ offset: t1!.offset, length: t1!.byteLength, sum: sum(bytes, t1!.offset, t1!.byteLength - 1) }]],
      [layout.tensors[3]!.name, [{ offset: layout.tensors[3]!.offset, length: 0, sum: '0'.repeat(16) }]],
      [t5!.name, reports[5]![1]],
    ];
    expect([...(await checkPublication(mapping, layout, loose, 2)).mismatched].sort()).toEqual([t1!.name, layout.tensors[3]!.name]);
    mapping.close();
  });
});
