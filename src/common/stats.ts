/** Small statistics shared by the demo, the probes, the benchmarks and the simulator. */

/** The median of xs (the mean of the two middle values for an even count); 0 for none. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The mean of xs; 0 for none. */
export function mean(xs: readonly number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/**
 * Nearest-rank percentile of a histogram (value -> count), such as a staleness histogram; 0 when
 * empty. Here rather than in sim-trainer, so that the simulator's metrics and other pure code use
 * the same numbers without importing a NATS client.
 */
export function histogramPercentile(histogram: Record<number, number>, q: number): number {
  const values = Object.keys(histogram)
    .map(Number)
    .sort((a, b) => a - b);
  let total = 0;
  for (const v of values) total += histogram[v]!;
  if (total === 0) return 0;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (const v of values) {
    seen += histogram[v]!;
    if (seen >= rank) return v;
  }
  return values[values.length - 1]!;
}

/** Adds histograms (value -> count) into one: the distribution of everything they counted. */
export function mergeHistograms(histograms: Iterable<Record<number, number>>): Record<number, number> {
  const merged: Record<number, number> = {};
  for (const h of histograms) for (const [value, count] of Object.entries(h)) merged[Number(value)] = (merged[Number(value)] ?? 0) + count;
  return merged;
}

/** The mean of a histogram's values weighted by their counts; 0 when empty. */
export function histogramMean(histogram: Record<number, number>): number {
  let total = 0;
  let sum = 0;
  for (const [value, count] of Object.entries(histogram)) {
    total += count;
    sum += Number(value) * count;
  }
  return total === 0 ? 0 : sum / total;
}
