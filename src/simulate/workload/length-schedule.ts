/**
 * The median output length over training (a scenario's `workload.outputTokens.median`): points
 * (step, tokens), piecewise linear between them, flat before the first and after the last. The
 * paper says response lengths drift as the policy trains (§2.2) but not how; the schedule is a
 * scenario input and the report lists it as an assumption.
 */
export interface MedianPoint {
  readonly step: number;
  readonly tokens: number;
}

/** The median at `step` (may be fractional); `points` have increasing steps (the schema checks). */
export function medianAt(points: readonly MedianPoint[], step: number): number {
  const first = points[0]!;
  if (step <= first.step) return first.tokens;
  for (let i = 1; i < points.length; i++) {
    const b = points[i]!;
    if (step <= b.step) {
      const a = points[i - 1]!;
      return a.tokens + ((b.tokens - a.tokens) * (step - a.step)) / (b.step - a.step);
    }
  }
  return points[points.length - 1]!.tokens;
}
