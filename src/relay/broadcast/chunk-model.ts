/**
 * Appendix C of the Laminar paper: the time of a chain-pipelined broadcast of M bytes in k
 * chunks over p relays (master included), with per-byte time T_byte = 1/bandwidth and per-message
 * start-up latency T_start:
 *
 *   T(p, k) = (p + k - 2) * (M/k * T_byte + T_start)
 *
 * minimised at k* = sqrt((p - 2) * M * T_byte / T_start).
 */
export interface LinkModel {
  /** Bytes per second of one link. */
  bandwidth: number;
  /** Start-up latency of one message, seconds. */
  startup: number;
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
