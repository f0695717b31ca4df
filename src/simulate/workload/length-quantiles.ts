/**
 * A response-length distribution given by its quantiles (a scenario's
 * `workload.outputTokens.quantiles`), for lengths that a log-normal does not describe: measured
 * ones, read off a histogram or computed from a run's logged lengths.
 *
 * Each point is a probability and the length at it as a multiple of the scenario's median
 * (`{ "p": 0.99, "ofMedian": 10 }`); the table passes through (0.5, 1). Between points the log of
 * the length is linear in the standard normal's quantile z = Φ⁻¹(p), and beyond the first and the
 * last it goes on with the slope of the segment next to it. A table of two points, (0.5, 1) and
 * (0.99, R), is therefore exactly the log-normal of p99/median R that `p99OverMedian` gives, and
 * every table is a monotone map of one normal draw: the same draws, the prompt's share of them
 * included (workload.ts), give each trajectory the length of the same rank whatever the shape.
 */

export interface LengthQuantile {
  readonly p: number;
  readonly ofMedian: number;
}

/**
 * The standard normal's quantile Φ⁻¹(p), 0 < p < 1: Acklam's rational approximation (relative
 * error below 1.2e-9), ample for a length table.
 */
export function normalQuantile(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`normalQuantile takes 0 < p < 1, got ${p}`);
  const a = [-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716, 2.506628277459239];
  const b = [-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572];
  const c = [-0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const low = 0.02425;
  if (p < low || p > 1 - low) {
    const q = Math.sqrt(-2 * Math.log(p < low ? p : 1 - p));
    const x = (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
    return p < low ? x : -x;
  }
  const q = p - 0.5;
  const r = q * q;
  return (
    ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) / (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1)
  );
}

/**
 * The length over the median at normal quantile z, as the table says (points sorted by p, two at
 * least): a function, the table's quantiles computed once.
 */
export function quantileShape(table: readonly LengthQuantile[]): (z: number) => number {
  const zs = table.map((q) => normalQuantile(q.p));
  const ys = table.map((q) => Math.log(q.ofMedian));
  return (z) => {
    // The segment z falls in, or the one at the nearer end.
    let i = 0;
    while (i < zs.length - 2 && z > zs[i + 1]!) i++;
    const slope = (ys[i + 1]! - ys[i]!) / (zs[i + 1]! - zs[i]!);
    return Math.exp(ys[i]! + slope * (z - zs[i]!));
  };
}
