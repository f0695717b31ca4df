/**
 * Copying a tensor into a version's memory on the libuv pool, checksummed in the parts the chunk
 * grid cuts it into (chunkAlignedParts): the unit in which a relay checks writers at commit, and
 * where a part fills its chunk, the chunk's own checksum.
 */
import type { Mapping } from '../../native/index.js';
import { chunkAlignedParts, type VersionLayout } from '../../safetensors/header.js';

/**
 * Jobs are runs of whole chunks of about this many bytes: small enough to spread one big tensor
 * over the pool's threads, large enough for each job to amortise its dispatch.
 */
export const WRITE_JOB_BYTES = 64 * 1024 * 1024;

/** A part of a written range inside one chunk, and the XXH3-64 of its bytes. */
export interface WrittenPart {
  offset: number;
  length: number;
  sum: bigint;
}

/**
 * Copies `src` to [offset, offset + src.byteLength) of `mapping` and resolves to the parts of
 * that range in consecutive chunks, in order, with their checksums. `src` must not change until
 * then.
 */
export async function writeChunkAligned(
  mapping: Mapping,
  grid: Pick<VersionLayout, 'dataOffset' | 'chunkSize'>,
  offset: number,
  src: Uint8Array,
): Promise<WrittenPart[]> {
  const parts = chunkAlignedParts(grid, offset, src.byteLength);
  if (src.byteLength === 0) return [{ offset, length: 0, sum: mapping.write(offset, src) }];
  // Native writeAsync cuts its range every chunkSize bytes, so a job starts on a chunk boundary
  // (every part but the first does) and covers whole chunks but for the range's end.
  const perJob = Math.max(1, Math.floor(WRITE_JOB_BYTES / grid.chunkSize));
  const jobs: Promise<bigint[]>[] = [];
  for (let first = 0; first < parts.length;) {
    const count = first === 0 && parts[0]!.length < grid.chunkSize ? 1 : Math.min(perJob, parts.length - first);
    const begin = parts[first]!.offset - offset;
    const last = parts[first + count - 1]!;
    jobs.push(mapping.writeAsync(offset + begin, src.subarray(begin, last.offset + last.length - offset), grid.chunkSize));
    first += count;
  }
  const sums = (await Promise.all(jobs)).flat();
  return parts.map((part, i) => ({ ...part, sum: sums[i]! }));
}
