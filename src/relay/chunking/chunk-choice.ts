/**
 * The relay's automatic chunk size (`--chunk-size auto`, the default): appendix C's optimum
 * (broadcast/chunk-model.ts) for a version of M bytes over a chain of p relays, kept within
 * bounds a relay can live with and rounded to a page multiple. Pure: the inputs (p, the link's
 * bandwidth, the per-chunk cost) come from chunk-sizer.ts.
 *
 * Rules, and why:
 * - at least 1 MiB (a smaller version is one chunk): below that the per-chunk work (messages,
 *   checksum bookkeeping, the JS that forwards a chunk) dominates whatever the model says, and the
 *   model's inputs are estimates;
 * - at most 32 MiB, the fixed default `auto` replaces: a chain of p ≤ 2 (nothing to pipeline)
 *   asks for one chunk of the whole version, and chunks never larger than before keep the stall
 *   limits tuned for them (`--peer-timeout` against one chunk's time on a link) and the commit's
 *   parallel checksum jobs as they were;
 * - a multiple of 2 MiB once the optimum is at least 2 MiB (a multiple of 4 KiB below that):
 *   segments are moving to 2 MiB pages, and a chunk of whole huge pages keeps each chunk's receive
 *   and checksum on pages of its own whenever the data section starts on a huge-page boundary.
 *   Of the two multiples around the optimum the one with the smaller modelled T(p, k) is taken:
 *   T is flat near its minimum (with chunk c = a·c*, the pipeline's overhead grows by
 *   (a + 1/a)/2), so the rounding costs well under 1 % of the broadcast time in practice.
 */
import { broadcastTime, type LinkModel } from '../broadcast/chunk-model.js';
import { DEFAULT_CHUNK_SIZE } from '../protocol/defaults.js';

export const PAGE_BYTES = 4096;
export const HUGE_PAGE_BYTES = 2 * 1024 * 1024;
/** The smallest chunk `auto` picks for a version larger than it. */
export const AUTO_MIN_CHUNK = 1024 * 1024;
/** The largest chunk `auto` picks: the fixed default it replaces (32 MiB). */
export const AUTO_MAX_CHUNK = DEFAULT_CHUNK_SIZE;

export interface ChunkChoice {
  /** Bytes per chunk: a multiple of 4 KiB (of 2 MiB from 2 MiB up). */
  chunkSize: number;
  /** Chunks of the version's data in that size. */
  chunks: number;
  /** The model's unrounded optimum, bytes (Infinity when nothing is pipelined: p ≤ 2). */
  idealBytes: number;
  /** T(p, k) of the model for the chosen chunk, seconds. */
  modelSeconds: number;
}

const roundUp = (n: number, to: number): number => Math.ceil(n / to) * to;

/**
 * Header room for the most chunks `auto` could cut `bytes` into (chunks of AUTO_MIN_CHUNK): with
 * it, a version's size does not depend on the chunk size chosen (planLayout's headerChunks), so
 * that a spare segment or a staging buffer sized by the last version fits the next one whatever
 * the estimate did meanwhile. About 19 bytes per MiB of data.
 */
export function autoHeaderChunks(bytes: number): number {
  return Math.max(1, Math.ceil(bytes / AUTO_MIN_CHUNK));
}

/**
 * The chunk size for `bytes` of tensor data broadcast over a chain of `p` relays (the source
 * counted: a relay publishing locally is p = plan length; a remote publisher adds one), on links
 * of `link.bandwidth` bytes/s with `link.startup` seconds of cost per chunk.
 */
export function chooseChunkSize(bytes: number, p: number, link: LinkModel): ChunkChoice {
  if (!(Number.isFinite(bytes) && bytes >= 0)) throw new RangeError(`chooseChunkSize needs a byte count, got ${bytes}`);
  if (!(Number.isInteger(p) && p >= 1)) throw new RangeError(`chooseChunkSize needs p >= 1 relays, got ${p}`);
  if (!(link.bandwidth > 0 && Number.isFinite(link.bandwidth))) throw new RangeError(`chooseChunkSize needs a positive bandwidth, got ${link.bandwidth}`);
  if (!(link.startup >= 0 && Number.isFinite(link.startup))) throw new RangeError(`chooseChunkSize needs a per-chunk cost >= 0, got ${link.startup}`);
  const hops = Math.max(2, p);
  const time = (chunkSize: number): number => broadcastTime(hops, Math.max(1, Math.ceil(bytes / chunkSize)), Math.max(bytes, 1), link);
  const result = (chunkSize: number, idealBytes: number): ChunkChoice => ({
    chunkSize,
    chunks: Math.max(1, Math.ceil(bytes / chunkSize)),
    idealBytes,
    modelSeconds: time(chunkSize),
  });
  // d/dk T = 0 at k* = sqrt((p-2) M T_byte / T_start): the chunk M/k* = sqrt(M T_start B / (p-2)).
  const ideal = p <= 2 ? Number.POSITIVE_INFINITY : link.startup === 0 ? 0 : Math.sqrt((bytes * link.startup * link.bandwidth) / (p - 2));
  // A version no larger than the smallest chunk is one chunk.
  if (bytes <= AUTO_MIN_CHUNK) return result(Math.max(PAGE_BYTES, roundUp(bytes, PAGE_BYTES)), ideal);
  const target = Math.min(AUTO_MAX_CHUNK, Math.max(AUTO_MIN_CHUNK, ideal));
  const granule = target >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : PAGE_BYTES;
  const low = Math.max(AUTO_MIN_CHUNK, Math.floor(target / granule) * granule);
  const high = Math.min(AUTO_MAX_CHUNK, roundUp(target, granule));
  return result(time(low) <= time(high) ? low : high, ideal);
}
