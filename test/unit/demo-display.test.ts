/** The demo's summary lines (src/demo/display.ts) that are computed rather than copied. */
import { describe, expect, it } from 'vitest';
import { stalenessSummary } from '../../src/demo/display.js';

const batch = (histogram: Record<number, number>): { p50: number; max: number; mean: number; histogram: Record<number, number> } => {
  const values = Object.keys(histogram).map(Number);
  const n = Object.values(histogram).reduce((a, c) => a + c, 0);
  const sorted = values.sort((a, b) => a - b).flatMap((v) => Array<number>(histogram[v]!).fill(v));
  return { p50: sorted[Math.ceil(n / 2) - 1]!, max: Math.max(...values), mean: sorted.reduce((a, v) => a + v, 0) / n, histogram };
};

describe('stalenessSummary', () => {
  it('gives the p50 and mean over every trajectory, a whole version even when the batches split evenly', () => {
    // Two batches with p50 0 and 1: the median of the batches' medians would be 0.5. Over their
    // 8 trajectories (three at 0, four at 1, one at 2) the nearest-rank median is 1.
    const even = [batch({ 0: 3, 1: 1 }), batch({ 1: 3, 2: 1 })];
    expect(even.map((b) => b.p50)).toEqual([0, 1]);
    expect(stalenessSummary(even)).toBe('p50 1, max 2, mean 0.75');
  });

  it('weighs batches by their trajectories, and reads zeros for a run without batches', () => {
    // A batch of 1 at staleness 4 beside one of 9 at 0: mean 0.4, not (4 + 0) / 2.
    expect(stalenessSummary([batch({ 4: 1 }), batch({ 0: 9 })])).toBe('p50 0, max 4, mean 0.40');
    expect(stalenessSummary([])).toBe('p50 0, max 0, mean 0.00');
  });
});
