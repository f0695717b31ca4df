/**
 * Appendix C of the Laminar paper: the time of a chain-pipelined broadcast of M bytes in k
 * chunks over p relays (master included), with per-byte time T_byte = 1/bandwidth and per-message
 * start-up latency T_start:
 *
 *   T(p, k) = (p + k - 2) * (M/k * T_byte + T_start)
 *
 * minimised at k* = sqrt((p - 2) * M * T_byte / T_start).
 *
 * T_start is everything a chunk costs besides its bytes. The paper takes it to be the link's
 * message latency (`ucx_perftest -t tag_lat`), a few microseconds; a relay adds its own work per
 * chunk (messages, checksum bookkeeping, JS, the rendezvous of a large message), which is tens
 * to hundreds of microseconds on a host short of cores and then decides k*. `perChunkCost`
 * measures it from one hop carrying the same bytes in two chunk sizes.
 */
export interface LinkModel {
  /** Bytes per second of one link. */
  bandwidth: number;
  /** Start-up time of one chunk, seconds: message latency plus the relay's per-chunk cost. */
  startup: number;
}

/** One hop carrying a version in `chunks` chunks took `seconds`. */
export interface HopTiming {
  chunks: number;
  seconds: number;
}

/**
 * A relay's cost per chunk beyond its bytes, from two hops of the same bytes in different chunk
 * counts: T = bytes * T_byte + k * t_chunk, so t_chunk = (T_a - T_b) / (k_a - k_b). Never
 * below 0 (two close timings can come out inverted).
 */
export function perChunkCost(a: HopTiming, b: HopTiming): number {
  if (a.chunks === b.chunks) throw new RangeError('perChunkCost needs two different chunk counts');
  if (!(a.seconds > 0 && b.seconds > 0)) throw new RangeError('perChunkCost needs positive timings');
  return Math.max(0, (a.seconds - b.seconds) / (a.chunks - b.chunks));
}

/** T(p, k) in seconds. p counts the master; p = 2 is a single hop. */
export function broadcastTime(p: number, k: number, bytes: number, link: LinkModel): number {
  if (p < 2 || k < 1) throw new RangeError('broadcastTime needs p >= 2 relays and k >= 1 chunks');
  return (p + k - 2) * (bytes / k / link.bandwidth + link.startup);
}

/** The chunk count minimising T(p, k), at least 1 and at most one chunk per 4 KiB. */
export function optimalChunkCount(p: number, bytes: number, link: LinkModel): number {
  const maxChunks = Math.max(1, Math.floor(bytes / 4096));
  if (p <= 2 || link.startup <= 0) return p <= 2 ? 1 : maxChunks;
  const ideal = Math.sqrt(((p - 2) * bytes) / link.bandwidth / link.startup);
  // T is convex in k: the best integer is next to the real optimum.
  const lo = Math.min(maxChunks, Math.max(1, Math.floor(ideal)));
  const hi = Math.min(maxChunks, lo + 1);
  return broadcastTime(p, lo, bytes, link) <= broadcastTime(p, hi, bytes, link) ? lo : hi;
}

/**
 * The chunk size (a multiple of 4 KiB, as segment data is page-aligned) that minimises T(p, k).
 * A single hop has no pipeline to fill, so it gets the largest chunk offered (`maxChunk`).
 */
export function optimalChunkSize(p: number, bytes: number, link: LinkModel, maxChunk = 1 << 30): number {
  const k = optimalChunkCount(p, bytes, link);
  const size = Math.ceil(bytes / k / 4096) * 4096;
  return Math.max(4096, Math.min(maxChunk, size));
}
