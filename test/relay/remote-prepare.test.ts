import { describe, expect, it } from 'vitest';
import { chunkChecksums } from '../../src/relay/chunk-checksums.js';
import { prepareVersion } from '../../src/relay/client/remote-publisher.js';
import { StagingBuffer } from '../../src/relay/client/staging.js';
import { parseHeader, readHeaderLength } from '../../src/safetensors/header.js';

const CHUNK = 4096;

describe("a remote push's version, laid out in private memory", () => {
  it('carries the checksum of every chunk, whether the copy computed it or a second read did', async () => {
    // A big tensor that fills whole chunks, small ones that share chunks, an empty one.
    const sizes = [10 * CHUNK + 100, 300, 0, 2 * CHUNK, 17];
    const tensors = sizes.map((n, i) => ({
      name: `t${i}`,
      dtype: 'U8' as const,
      shape: [n],
      data: Uint8Array.from({ length: n }, (_, j) => (j * 13 + i) % 256),
    }));
    const prepared = await prepareVersion({ model: 'org/m', version: 3, tensors }, CHUNK);
    try {
      const { layout, mapping } = prepared;
      const headerLength = readHeaderLength(new Uint8Array(mapping.view(0, 8)), mapping.size);
      const parsed = parseHeader(Buffer.from(mapping.view(8, headerLength)), mapping.size);
      expect(parsed.laminar!.checksums).toEqual(await chunkChecksums(mapping, layout, 2));
      for (const [i, t] of layout.tensors.entries()) {
        expect(Buffer.from(mapping.view(t.offset, t.byteLength)).equals(Buffer.from(tensors[i]!.data))).toBe(true);
      }
      await expect(prepareVersion({ model: 'org/m', version: 4, tensors: [{ ...tensors[0]!, shape: [5] }] }, CHUNK)).rejects.toMatchObject({
        code: 'ERR_BAD_TENSOR',
      });
    } finally {
      prepared.close();
    }
  });
});

describe('staging buffer of a remote publisher', () => {
  it('hands the same private memory to the next version of the same size, overwritten whole', async () => {
    const staging = new StagingBuffer();
    const request = (version: number, seed: number) => ({
      model: 'org/m',
      version,
      tensors: [CHUNK * 3 + 5, 77].map((n, i) => ({
        name: `t${i}`,
        dtype: 'U8' as const,
        shape: [n],
        data: Uint8Array.from({ length: n }, (_, j) => (j + seed * 7 + i) % 256),
      })),
    });
    const first = await prepareVersion(request(1, 1), CHUNK, staging);
    const mapping = first.mapping;
    first.close();
    expect(mapping.closed).toBe(false); // kept
    const second = await prepareVersion(request(2, 2), CHUNK, staging);
    expect(second.mapping).toBe(mapping);
    const headerLength = readHeaderLength(new Uint8Array(mapping.view(0, 8)), mapping.size);
    const parsed = parseHeader(Buffer.from(mapping.view(8, headerLength)), mapping.size);
    expect(parsed.laminar).toMatchObject({ version: 2, checksums: await chunkChecksums(mapping, second.layout, 2) });
    const t0 = second.layout.tensors[0]!;
    expect(Buffer.from(mapping.view(t0.offset, t0.byteLength)).equals(Buffer.from(request(2, 2).tensors[0]!.data))).toBe(true);
    // Taken while the kept one is in use: a new mapping; given back, it replaces the kept one.
    const third = await prepareVersion(request(3, 3), CHUNK, staging);
    expect(third.mapping).not.toBe(mapping);
    second.close();
    third.close();
    expect(mapping.closed).toBe(true);
    expect(third.mapping.closed).toBe(false);
    // Another size: a new mapping, the kept one goes. Closed: nothing is kept.
    const other = staging.take(third.mapping.size + 4096);
    expect(third.mapping.closed).toBe(true);
    staging.close();
    staging.give(other);
    expect(other.closed).toBe(true);
  });
});
