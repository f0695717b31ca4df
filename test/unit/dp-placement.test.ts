/** Heddle's presorted DP placement (§5.2): optimal by enumeration on small cases, never worse than least-load. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes, InvalidInputError } from '../../src/common/errors.js';
import {
  placementMakespan,
  planDpPlacement,
  presort,
  rooflineInterference,
  type InterferenceFactor,
  type Placement,
  type PredictedTrajectory,
} from '../../src/manager/repack/dp-placement.js';
import { planLeastLoadPlacement } from '../../src/manager/repack/least-load-placement.js';

const workersOf = (m: number): string[] => Array.from({ length: m }, (_, i) => `w${i}`);

/** A non-decreasing f from increments: f(s) = 1 + sum of the first s − 1 increments. */
function steppedInterference(increments: readonly number[]): InterferenceFactor {
  return (s) => 1 + increments.slice(0, s - 1).reduce((a, b) => a + b, 0);
}

/** Best makespan over every way of cutting the presorted order into m runs (empty runs allowed). */
function bestContiguous(lengths: readonly number[], m: number, f: InterferenceFactor): number {
  const n = lengths.length;
  let best = Infinity;
  const cuts: number[] = [];
  const walk = (from: number, left: number): void => {
    if (left === 1) {
      const bounds = [0, ...cuts, n];
      const groups = bounds.slice(1).map((end, k) => lengths.slice(bounds[k], end));
      best = Math.min(best, placementMakespan(groups, f));
      return;
    }
    for (let c = from; c <= n; c++) {
      cuts.push(c);
      walk(c, left - 1);
      cuts.pop();
    }
  };
  walk(0, m);
  return best;
}

/** Best makespan over every assignment of trajectories to workers (m^n of them). */
function bestAnyAssignment(lengths: readonly number[], m: number, f: InterferenceFactor): number {
  let best = Infinity;
  const total = m ** lengths.length;
  for (let code = 0; code < total; code++) {
    const groups: number[][] = Array.from({ length: m }, () => []);
    let c = code;
    for (const l of lengths) {
      groups[c % m]!.push(l);
      c = Math.floor(c / m);
    }
    best = Math.min(best, placementMakespan(groups, f));
  }
  return best;
}

function lengthsOf(placement: Placement, trajectories: readonly PredictedTrajectory[]): number[][] {
  const byId = new Map(trajectories.map((t) => [t.id, t.predictedTokens]));
  return placement.assignments.map((a) => a.trajectories.map((id) => byId.get(id)!));
}

const trajectoriesArb = (maxLength: number) =>
  fc
    .array(fc.integer({ min: 0, max: 20_000 }), { minLength: 0, maxLength })
    .map((ls) => ls.map((predictedTokens, i) => ({ id: `t${String(i).padStart(3, '0')}`, predictedTokens })));
const interferenceArb = fc.oneof(
  fc.array(fc.double({ min: 0, max: 2, noNaN: true }), { minLength: 40, maxLength: 40 }).map(steppedInterference),
  fc.integer({ min: 1, max: 6 }).map(rooflineInterference),
);

describe('presorted DP placement', () => {
  it('is optimal among contiguous groupings of the presorted order (enumeration)', () => {
    fc.assert(
      fc.property(trajectoriesArb(9), fc.integer({ min: 1, max: 4 }), interferenceArb, (ts, m, f) => {
        const plan = planDpPlacement(ts, workersOf(m), f);
        const sorted = presort(ts).map((t) => t.predictedTokens);
        expect(plan.makespan).toBeCloseTo(bestContiguous(sorted, m, f), 9);
      }),
      { numRuns: 300 },
    );
  });

  it('is optimal among all placements on small cases (Heddle Lemma 5.1)', () => {
    fc.assert(
      fc.property(trajectoriesArb(7), fc.integer({ min: 1, max: 3 }), interferenceArb, (ts, m, f) => {
        const plan = planDpPlacement(ts, workersOf(m), f);
        expect(plan.makespan).toBeCloseTo(
          bestAnyAssignment(
            ts.map((t) => t.predictedTokens),
            m,
            f,
          ),
          9,
        );
      }),
      { numRuns: 200 },
    );
  });

  it('places every trajectory once, in contiguous runs of the presorted order, and reports its own makespan', () => {
    fc.assert(
      fc.property(trajectoriesArb(60), fc.integer({ min: 1, max: 12 }), interferenceArb, (ts, m, f) => {
        const plan = planDpPlacement(ts, workersOf(m), f);
        expect(plan.assignments.map((a) => a.worker)).toEqual(workersOf(m));
        expect(plan.assignments.flatMap((a) => a.trajectories)).toEqual(presort(ts).map((t) => t.id));
        expect(plan.makespan).toBeCloseTo(placementMakespan(lengthsOf(plan, ts), f), 9);
      }),
      { numRuns: 200 },
    );
  });

  it('is never worse than greedy least-load on the same input', () => {
    fc.assert(
      fc.property(trajectoriesArb(200), fc.integer({ min: 1, max: 32 }), interferenceArb, (ts, m, f) => {
        const dp = planDpPlacement(ts, workersOf(m), f);
        const greedy = planLeastLoadPlacement(ts, workersOf(m), f);
        expect(greedy.makespan).toBeCloseTo(placementMakespan(lengthsOf(greedy, ts), f), 9);
        expect(dp.makespan).toBeLessThanOrEqual(greedy.makespan * (1 + 1e-12));
      }),
      { numRuns: 200 },
    );
  });

  it('does not depend on the order the trajectories are listed in', () => {
    fc.assert(
      fc.property(trajectoriesArb(40), fc.integer({ min: 1, max: 8 }), interferenceArb, (ts, m, f) => {
        expect(planDpPlacement([...ts].reverse(), workersOf(m), f)).toEqual(planDpPlacement(ts, workersOf(m), f));
      }),
    );
  });

  it('separates the long tail from the short ones (worked example)', () => {
    // B = 1: a worker's tokens slow in proportion to the trajectories it carries. Least-load fills
    // the third worker with short ones until its load equals long-b's, then puts the ninth short
    // one beside long-b (a tie in load, fewer trajectories there), doubling long-b's time; the DP
    // gives each long one a worker of its own and every short one to the third.
    const ts = [
      { id: 'long-a', predictedTokens: 9000 },
      { id: 'long-b', predictedTokens: 8000 },
      ...Array.from({ length: 10 }, (_, i) => ({ id: `short-${i}`, predictedTokens: 1000 })),
    ];
    const f = rooflineInterference(1);
    const dp = planDpPlacement(ts, ['w0', 'w1', 'w2'], f);
    expect(dp.assignments).toEqual([
      { worker: 'w0', trajectories: ['long-a'] },
      { worker: 'w1', trajectories: ['long-b'] },
      { worker: 'w2', trajectories: Array.from({ length: 10 }, (_, i) => `short-${i}`) },
    ]);
    expect(dp.makespan).toBe(10_000);
    const greedy = planLeastLoadPlacement(ts, ['w0', 'w1', 'w2'], f);
    expect(greedy.assignments[1]).toEqual({ worker: 'w1', trajectories: ['long-b', 'short-8'] });
    expect(greedy.makespan).toBe(16_000);
  });

  it('rejects bad input with ERR_INVALID_ARG', () => {
    const one = [{ id: 'a', predictedTokens: 1 }];
    const f = rooflineInterference(4);
    const bad: [() => unknown, string][] = [
      [() => planDpPlacement(one, [], f), 'at least one worker'],
      [() => planDpPlacement(one, ['w', 'w'], f), 'listed twice'],
      [() => planDpPlacement([...one, ...one], ['w'], f), 'listed twice'],
      [() => planDpPlacement([{ id: 'a', predictedTokens: -1 }], ['w'], f), 'finite number >= 0'],
      [() => planDpPlacement([{ id: 'a', predictedTokens: Number.NaN }], ['w'], f), 'finite number >= 0'],
      [() => planDpPlacement([...one, { id: 'b', predictedTokens: 2 }], ['w'], (s) => 3 - s), 'non-decreasing'],
      [() => rooflineInterference(0), 'positive integer'],
    ];
    for (const [call, message] of bad) {
      expect(call).toThrow(InvalidInputError);
      expect(call).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG, message: expect.stringContaining(message) as string }));
    }
  });
});
