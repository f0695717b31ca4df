/** The per-chunk checksums of a version's data, computed on the libuv pool. */
import { mapLimit } from '../common/concurrency.js';
import { checksumHex, type Mapping } from '../native/index.js';
import { chunkRange, type VersionLayout } from '../safetensors/header.js';

/**
 * One 16-hex-digit XXH3-64 per chunk of `layout`, read from `mapping`, `concurrency` at a time;
 * chunks in `known` (index -> checksum, e.g. from the copy that filled them) are not read.
 */
export async function chunkChecksums(
  mapping: Mapping,
  layout: Pick<VersionLayout, 'dataOffset' | 'dataLength' | 'chunkSize' | 'chunkCount'>,
  concurrency: number,
  known: ReadonlyMap<number, bigint> = new Map(),
): Promise<string[]> {
  const indices = Array.from({ length: layout.chunkCount }, (_, i) => i);
  const sums = await mapLimit(indices, concurrency, async (i) => {
    const { offset, length } = chunkRange(layout, i);
    return known.get(i) ?? (await mapping.checksumAsync(offset, length));
  });
  return sums.map(checksumHex);
}
