/**
 * What a relay learns about its link from its own sends: every hop it sent downstream is a sample
 * (bytes, chunks, seconds the link carried them), and under appendix C's model one hop takes
 *
 *   seconds = bytes / B + chunks * t_chunk
 *
 * (B the link's bandwidth, t_chunk what a chunk costs besides its bytes). Pure: the samples come
 * from broadcast/downstream.ts, the estimates go to chunk-sizer.ts.
 *
 * - t_chunk: weighted least squares over the recent samples (residuals relative to each hop's
 *   time, so that a big hop does not drown the others), used only when it can be told from the
 *   noise: at least 4 hops, chunk sizes at least 4 times apart (as the probe's 1 MiB against
 *   16 MiB), a plausible fit (0 < t_chunk ≤ 10 ms, B > 0) and t_chunk at least twice its own
 *   standard error. Hops all in one chunk size cannot separate the terms at all, and on a busy
 *   host a few hops in sizes 4 times apart differ by less than their noise (256 chunks more of
 *   1 GiB at 250 µs is 64 ms of a 4 s hop): a relay keeps the prior (a flag or the documented
 *   default) until its hops say more.
 * - B: an exponentially weighted moving average (α = 0.5: the last hop weighs a half, the one
 *   before a quarter) of each hop's bytes over its time less its chunks' cost: it follows a link
 *   whose load changes within two or three versions, and a hop's noise (a few per cent on a busy
 *   host) moves the chunk size by less, as that goes with the square root of B.
 * - Hops too small to time (under 16 MiB or 10 ms: a test's or a tiny model's) are not samples.
 */

export interface HopSample {
  /** Bytes of chunks sent (resends included). */
  bytes: number;
  /** Chunks sent. */
  chunks: number;
  /** Seconds during which the link had chunks in flight. */
  seconds: number;
}

export const ESTIMATE_WINDOW = 32;
export const BANDWIDTH_EWMA_ALPHA = 0.5;
export const MIN_SAMPLE_BYTES = 16 * 1024 * 1024;
export const MIN_SAMPLE_SECONDS = 0.01;
/** The fit must see chunk sizes at least this far apart. */
export const MIN_CHUNK_SPREAD = 4;
/** Hops the fit needs: two unknowns, and two degrees of freedom left to judge its noise. */
export const MIN_FIT_SAMPLES = 4;
export const MAX_PLAUSIBLE_CHUNK_COST = 0.01;

/** Whether a hop is big enough to say something about the link. */
export function isUsableSample(s: HopSample): boolean {
  return s.chunks >= 1 && s.bytes >= MIN_SAMPLE_BYTES && s.seconds >= MIN_SAMPLE_SECONDS && Number.isFinite(s.seconds);
}

/**
 * t_chunk by weighted least squares of seconds = u·bytes + c·chunks (no intercept), each row
 * divided by its seconds; null when the samples cannot separate the terms, the fit is not
 * plausible or not clear of its standard error.
 */
export function fitChunkCost(samples: readonly HopSample[]): number | null {
  if (samples.length < MIN_FIT_SAMPLES) return null;
  const perChunk = samples.map((s) => s.bytes / s.chunks);
  if (Math.max(...perChunk) < MIN_CHUNK_SPREAD * Math.min(...perChunk)) return null;
  // Normal equations of the scaled rows [b/t, k/t] · [u, c] = 1, in units that keep them well
  // conditioned (GB and thousands of chunks).
  let sbb = 0;
  let sbk = 0;
  let skk = 0;
  let sb = 0;
  let sk = 0;
  for (const s of samples) {
    const b = s.bytes / 1e9 / s.seconds;
    const k = s.chunks / 1e3 / s.seconds;
    sbb += b * b;
    sbk += b * k;
    skk += k * k;
    sb += b;
    sk += k;
  }
  const det = sbb * skk - sbk * sbk;
  if (!(det > 1e-12 * sbb * skk)) return null;
  const u = (sb * skk - sk * sbk) / det; // seconds per GB
  const cScaled = (sbb * sk - sbk * sb) / det; // seconds per thousand chunks
  const c = cScaled / 1e3;
  if (!(u > 0) || !(c > 0) || c > MAX_PLAUSIBLE_CHUNK_COST) return null;
  let rss = 0;
  for (const s of samples) rss += (1 - (u * s.bytes) / 1e9 / s.seconds - (cScaled * s.chunks) / 1e3 / s.seconds) ** 2;
  // Var(c) = sigma^2 (X'X)^-1_cc, sigma^2 estimated from the residuals.
  const standardError = Math.sqrt(((rss / (samples.length - 2)) * sbb) / det);
  return cScaled >= 2 * standardError ? c : null;
}

/** B as the EWMA of each hop's bytes over its time less `chunkCost` per chunk (oldest first); null with no samples. */
export function averageBandwidth(samples: readonly HopSample[], chunkCost: number, alpha = BANDWIDTH_EWMA_ALPHA): number | null {
  let estimate: number | null = null;
  for (const s of samples) {
    // The chunks' cost can at most halve a hop's time: an overestimated cost must not make a
    // link look infinitely fast.
    const rate = s.bytes / Math.max(s.seconds - s.chunks * chunkCost, s.seconds / 2);
    estimate = estimate === null ? rate : alpha * rate + (1 - alpha) * estimate;
  }
  return estimate;
}

export interface LinkEstimate {
  /** Bytes per second, null before the first usable hop. */
  bandwidth: number | null;
  /** Seconds per chunk fitted from the hops, null while they cannot tell it apart. */
  chunkCost: number | null;
  /** Usable hops in the window. */
  samples: number;
}

/** The recent usable hops of one relay and the estimates they give. */
export class LinkEstimator {
  private readonly samples: HopSample[] = [];
  /** Hops offered, usable or not (a metric counts them). */
  offered = 0;

  constructor(private readonly window = ESTIMATE_WINDOW) {}

  /** Adds a hop; returns whether it was usable. */
  record(sample: HopSample): boolean {
    this.offered++;
    if (!isUsableSample(sample)) return false;
    this.samples.push({ ...sample });
    if (this.samples.length > this.window) this.samples.splice(0, this.samples.length - this.window);
    return true;
  }

  /** The estimates; `priorChunkCost` stands in for t_chunk in B's average while the fit has none. */
  estimate(priorChunkCost: number): LinkEstimate {
    const chunkCost = fitChunkCost(this.samples);
    return { bandwidth: averageBandwidth(this.samples, chunkCost ?? priorChunkCost), chunkCost, samples: this.samples.length };
  }
}
