/** The repack planner (paper §5.2, Algorithm 1): invariants, a worked example, and a literal transcription to compare with. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes, InvalidInputError } from '../../src/common/errors.js';
import {
  DEFAULT_REPACK_LIMITS,
  groupByWeightVersion,
  planRepack,
  projectLoads,
  repackCandidates,
  validateRepackLimits,
  type RepackLimits,
  type RepackMove,
  type RolloutLoad,
} from '../../src/manager/repack/planner.js';

/**
 * Algorithm 1 line by line, re-summing P for every load. `destinationsStay` adds the one rule
 * that is not in the listing (a rollout already chosen as a destination is not taken as a
 * source); without it this is the paper exactly as printed.
 */
function referencePlan(rollouts: RolloutLoad[], { cMax, rooflineBatch: B }: RepackLimits, destinationsStay = true): RepackMove[] {
  const S = rollouts
    .filter((r) => r.kvUsed < Math.min(cMax, r.kvPrev) && r.running < B)
    .sort((a, b) => a.kvUsed - b.kvUsed || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const P: [RolloutLoad, RolloutLoad][] = [];
  const E = new Set<RolloutLoad>();
  const cLoad = (d: RolloutLoad): number => {
    let c = d.kvUsed;
    for (const [s2, d2] of P) if (d2 === d) c += s2.kvUsed;
    return c;
  };
  const nLoad = (d: RolloutLoad): number => {
    let n = d.running;
    for (const [s2, d2] of P) if (d2 === d) n += s2.running;
    return n;
  };
  const canFit = (d: RolloutLoad, s: RolloutLoad): boolean => cLoad(d) + s.kvUsed <= cMax && nLoad(d) + s.running <= B;
  for (const s of S) {
    if (E.has(s)) continue;
    if (destinationsStay && P.some(([, d]) => d === s)) continue;
    const D = S.filter((d) => !E.has(d) && d !== s && canFit(d, s));
    if (D.length === 0) continue;
    const best = D.reduce((a, d) => (cLoad(d) > cLoad(a) || (cLoad(d) === cLoad(a) && d.id < a.id) ? d : a));
    P.push([s, best]);
    E.add(s);
  }
  return P.map(([s, d]) => ({ source: s.id, destination: d.id }));
}

const kvArb = fc.oneof(
  fc.double({ min: 0, max: 1, noNaN: true }),
  fc.double({ min: 0, max: 0.3, noNaN: true }),
  // Coarse values give equal loads, which exercise the tie-breaks.
  fc.integer({ min: 0, max: 20 }).map((x) => x / 20),
);
const limitsArb = (maxBatch = 512): fc.Arbitrary<RepackLimits> =>
  fc.record({
    cMax: fc.oneof(fc.constant(0.99), fc.constant(1), fc.double({ min: 0.05, max: 1, noNaN: true })),
    rooflineBatch: fc.integer({ min: 1, max: maxBatch }),
  });
/** Mostly rollouts in ramp-down (usage fell since the last sample), some still ramping or independent. */
const rolloutArb = (b: number): fc.Arbitrary<RolloutLoad> =>
  fc
    .record({
      id: fc.string({ minLength: 1, maxLength: 6 }),
      kv: fc
        .tuple(kvArb, kvArb)
        .chain(([used, other]) =>
          fc.oneof(
            { weight: 3, arbitrary: fc.constant({ kvUsed: Math.min(used, other), kvPrev: Math.max(used, other) }) },
            { weight: 1, arbitrary: fc.constant({ kvUsed: used, kvPrev: other }) },
          ),
        ),
      running: fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 0, max: b }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 2 * b }) }),
    })
    .map(({ id, kv, running }) => ({ id, ...kv, running }));
const fleetArb = (maxBatch?: number): fc.Arbitrary<{ limits: RepackLimits; rollouts: RolloutLoad[] }> =>
  limitsArb(maxBatch).chain((limits) =>
    fc.record({
      limits: fc.constant(limits),
      rollouts: fc.uniqueArray(rolloutArb(limits.rooflineBatch), { selector: (r) => r.id, maxLength: 64, size: 'max' }),
    }),
  );

function load(id: string, kvUsed: number, running: number, kvPrev = kvUsed + 0.01): RolloutLoad {
  return { id, kvUsed, kvPrev, running };
}

describe('repack plan invariants', () => {
  it('moves only between candidates, each source once, never to or from a destination, within C_max and B', () => {
    fc.assert(
      fc.property(fleetArb(), ({ limits, rollouts }) => {
        const plan = planRepack(rollouts, limits);
        const candidates = new Set(repackCandidates(rollouts, limits).map((r) => r.id));
        const sources = plan.map((m) => m.source);
        const destinations = new Set(plan.map((m) => m.destination));
        for (const { source, destination } of plan) {
          expect(candidates.has(source)).toBe(true);
          expect(candidates.has(destination)).toBe(true);
          expect(source).not.toBe(destination);
        }
        for (const r of rollouts) if (!candidates.has(r.id)) expect(sources.includes(r.id) || destinations.has(r.id)).toBe(false);
        expect(new Set(sources).size).toBe(sources.length);
        for (const s of sources) expect(destinations.has(s)).toBe(false);
        const after = projectLoads(rollouts, plan);
        for (const d of destinations) {
          expect(after.get(d)!.kvUsed).toBeLessThanOrEqual(limits.cMax);
          expect(after.get(d)!.running).toBeLessThanOrEqual(limits.rooflineBatch);
        }
        for (const s of sources) expect(after.get(s)).toEqual({ kvUsed: 0, running: 0 });
      }),
      { numRuns: 300 },
    );
  });

  it('leaves no candidate untouched that would still fit somewhere', () => {
    // Loads only grow during a round, so a candidate that fit nowhere at its turn fits nowhere at the end.
    fc.assert(
      fc.property(fleetArb(), ({ limits, rollouts }) => {
        const plan = planRepack(rollouts, limits);
        const after = projectLoads(rollouts, plan);
        const sources = new Set(plan.map((m) => m.source));
        const destinations = new Set(plan.map((m) => m.destination));
        const candidates = repackCandidates(rollouts, limits);
        for (const u of candidates) {
          if (sources.has(u.id) || destinations.has(u.id)) continue;
          for (const d of candidates) {
            if (d === u || sources.has(d.id)) continue;
            const p = after.get(d.id)!;
            expect(p.kvUsed + u.kvUsed > limits.cMax || p.running + u.running > limits.rooflineBatch).toBe(true);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('does not depend on the order the rollouts are listed in', () => {
    fc.assert(
      fc.property(
        fleetArb().chain(({ limits, rollouts }) =>
          fc.record({
            limits: fc.constant(limits),
            rollouts: fc.constant(rollouts),
            shuffled: fc.shuffledSubarray(rollouts, { minLength: rollouts.length, maxLength: rollouts.length }),
          }),
        ),
        ({ limits, rollouts, shuffled }) => {
          expect(planRepack(shuffled, limits)).toEqual(planRepack(rollouts, limits));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('makes the same plan as a literal transcription of Algorithm 1', () => {
    fc.assert(
      fc.property(fleetArb(), ({ limits, rollouts }) => {
        expect(planRepack(rollouts, limits)).toEqual(referencePlan(rollouts, limits));
      }),
      { numRuns: 500 },
    );
  });

  it('neither loses nor duplicates a trajectory when the plan is executed', () => {
    const arb = fleetArb(8).chain(({ limits, rollouts }) => {
      const total = rollouts.reduce((sum, r) => sum + r.running, 0);
      return fc.record({
        limits: fc.constant(limits),
        rollouts: fc.constant(rollouts),
        trajectories: fc.uniqueArray(fc.string({ minLength: 1, maxLength: 10 }), { minLength: total, maxLength: total }),
      });
    });
    fc.assert(
      fc.property(arb, ({ limits, rollouts, trajectories }) => {
        // Each rollout runs exactly `running` trajectories, so the projection can be checked against the moved ids.
        const held = new Map<string, string[]>();
        let next = 0;
        for (const r of rollouts) {
          held.set(r.id, trajectories.slice(next, next + r.running));
          next += r.running;
        }
        const plan = planRepack(rollouts, limits);
        for (const { source, destination } of plan) {
          held.get(destination)!.push(...held.get(source)!);
          held.set(source, []);
        }
        expect([...held.values()].flat().sort()).toEqual([...trajectories].sort());
        for (const { source } of plan) expect(held.get(source)).toEqual([]);
        const after = projectLoads(rollouts, plan);
        for (const r of rollouts) expect(held.get(r.id)!.length).toBe(after.get(r.id)!.running);
      }),
      { numRuns: 200 },
    );
  });
});

describe('repack plan by hand', () => {
  it('consolidates the ramp-down rollouts of a worked example', () => {
    const limits = { cMax: 0.99, rooflineBatch: 64 };
    const rollouts = [
      load('E', 0.95, 40, 0.9), // still ramping up (0.95 > 0.90): not a candidate
      load('D', 0.6, 20, 0.7),
      load('F', 0.3, 64, 0.5), // runs B requests already: not a candidate
      load('C', 0.35, 10, 0.5),
      load('B', 0.2, 6, 0.3),
      load('A', 0.1, 4, 0.2),
    ];
    // Line 4: S = A (.10), B (.20), C (.35), D (.60).
    expect(repackCandidates(rollouts, limits).map((r) => r.id)).toEqual(['A', 'B', 'C', 'D']);
    // s = A: B (.20 + .10), C (.35 + .10), D (.60 + .10, 20 + 4 requests) all fit; D is the
    //        most loaded: (A, D). D now at .70 / 24.
    // s = B: C (.35 + .20) and D (.70 + .20 = .90, 24 + 6 = 30) fit; D again: (B, D). D at .90 / 30.
    // s = C: D (.90 + .35 = 1.25) does not fit, A and B are emptied: C stays.
    // s = D: a destination, not a source (as printed, D_D = {C}: .35 + .60 = .95, 10 + 20 = 30,
    //        so the listing alone would also send D to C while A and B are on their way to D).
    const plan = planRepack(rollouts, limits);
    expect(plan).toEqual([
      { source: 'A', destination: 'D' },
      { source: 'B', destination: 'D' },
    ]);
    expect(referencePlan(rollouts, limits, false)).toEqual([...plan, { source: 'D', destination: 'C' }]);
    const after = projectLoads(rollouts, plan);
    expect(after.get('D')!.kvUsed).toBeCloseTo(0.9, 12);
    expect(after.get('D')!.running).toBe(30);
    expect(after.get('A')).toEqual({ kvUsed: 0, running: 0 });
    expect(after.get('B')).toEqual({ kvUsed: 0, running: 0 });
    expect(after.get('C')).toEqual({ kvUsed: 0.35, running: 10 });
    expect(after.get('E')).toEqual({ kvUsed: 0.95, running: 40 });
  });

  it('picks the feasible destination that is densest after the move', () => {
    const limits = { cMax: 0.99, rooflineBatch: 64 };
    // X fits on Y (.70) and on Z (.85): Z is denser.
    expect(planRepack([load('X', 0.3, 10), load('Y', 0.4, 10), load('Z', 0.55, 10)], limits)).toEqual([{ source: 'X', destination: 'Z' }]);
    // Z would be denser but 30 + 40 requests exceed B: Y it is.
    expect(planRepack([load('X', 0.3, 30), load('Y', 0.4, 10), load('Z', 0.55, 40)], limits)).toEqual([{ source: 'X', destination: 'Y' }]);
  });

  it('breaks ties by id, whatever the input order', () => {
    const limits = { cMax: 0.99, rooflineBatch: 64 };
    const rollouts = [load('R', 0.3, 1), load('Q', 0.3, 1), load('P', 0.2, 1)];
    // P goes to Q or R (both at .30): Q. R then joins Q (.50 + .30).
    const expected = [
      { source: 'P', destination: 'Q' },
      { source: 'R', destination: 'Q' },
    ];
    expect(planRepack(rollouts, limits)).toEqual(expected);
    expect(planRepack([...rollouts].reverse(), limits)).toEqual(expected);
  });

  it('treats C_max and B as inclusive bounds for destinations and strict ones for candidates', () => {
    const limits = { cMax: 0.5, rooflineBatch: 8 };
    expect(planRepack([load('a', 0.25, 4), load('b', 0.25, 4)], limits)).toEqual([{ source: 'a', destination: 'b' }]);
    expect(repackCandidates([load('full', 0.5, 1, 0.6), load('busy', 0.1, 8, 0.2), load('flat', 0.2, 1, 0.2)], limits)).toEqual([]);
  });

  it('plans nothing for an empty or single-rollout group', () => {
    expect(planRepack([], DEFAULT_REPACK_LIMITS)).toEqual([]);
    expect(planRepack([load('a', 0.1, 1)], DEFAULT_REPACK_LIMITS)).toEqual([]);
  });
});

describe('repack inputs', () => {
  it('rejects limits outside the model with a stable code', () => {
    const bad: RepackLimits[] = [
      { cMax: 0, rooflineBatch: 256 },
      { cMax: -0.1, rooflineBatch: 256 },
      { cMax: 1.01, rooflineBatch: 256 },
      { cMax: Number.NaN, rooflineBatch: 256 },
      { cMax: Number.POSITIVE_INFINITY, rooflineBatch: 256 },
      { cMax: 0.99, rooflineBatch: 0 },
      { cMax: 0.99, rooflineBatch: -4 },
      { cMax: 0.99, rooflineBatch: 1.5 },
      { cMax: 0.99, rooflineBatch: Number.NaN },
      { cMax: 0.99, rooflineBatch: Number.POSITIVE_INFINITY },
    ];
    for (const limits of bad) {
      for (const call of [() => validateRepackLimits(limits), () => planRepack([], limits), () => repackCandidates([], limits)]) {
        let caught: unknown;
        try {
          call();
        } catch (err) {
          caught = err;
        }
        expect(caught).toBeInstanceOf(InvalidInputError);
        expect((caught as InvalidInputError).code).toBe(ErrorCodes.REPACK_LIMITS);
      }
    }
    expect(ErrorCodes.REPACK_LIMITS).toBe('ERR_REPACK_LIMITS');
    expect(() => validateRepackLimits({ cMax: 1, rooflineBatch: 1 })).not.toThrow();
    expect(() => validateRepackLimits(DEFAULT_REPACK_LIMITS)).not.toThrow();
    expect(DEFAULT_REPACK_LIMITS).toEqual({ cMax: 0.99, rooflineBatch: 256 });
  });

  it('rejects duplicate rollout ids and plans it did not make', () => {
    expect(() => planRepack([load('a', 0.1, 1), load('a', 0.2, 1)], DEFAULT_REPACK_LIMITS)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    const rollouts = [load('a', 0.1, 1), load('b', 0.2, 1), load('c', 0.3, 1)];
    for (const plan of [
      [{ source: 'a', destination: 'x' }],
      [{ source: 'a', destination: 'a' }],
      [
        { source: 'a', destination: 'b' },
        { source: 'a', destination: 'c' },
      ],
      [
        { source: 'a', destination: 'b' },
        { source: 'b', destination: 'c' },
      ],
      [
        { source: 'b', destination: 'c' },
        { source: 'a', destination: 'b' },
      ],
    ]) {
      expect(() => projectLoads(rollouts, plan)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    }
  });

  it('leaves rollouts with broken samples out of the candidates', () => {
    const broken = [
      load('nan', Number.NaN, 1, 0.5),
      load('neg', -0.1, 1, 0.5),
      load('ninf', Number.NEGATIVE_INFINITY, 1, 0.5),
      load('n', 0.1, Number.NaN, 0.5),
      load('prev', 0.1, 1, Number.NaN),
    ];
    expect(repackCandidates(broken, DEFAULT_REPACK_LIMITS)).toEqual([]);
    expect(planRepack([...broken, load('ok', 0.1, 1)], DEFAULT_REPACK_LIMITS)).toEqual([]);
  });

  it('groups rollouts by weight version, keeping input order', () => {
    const items = [
      { id: 'a', weightVersion: 3 },
      { id: 'b', weightVersion: 2 },
      { id: 'c', weightVersion: 3 },
      { id: 'd', weightVersion: 2 },
      { id: 'e', weightVersion: 4 },
    ];
    const groups = groupByWeightVersion(items);
    expect([...groups.keys()]).toEqual([3, 2, 4]);
    expect(groups.get(3)!.map((i) => i.id)).toEqual(['a', 'c']);
    expect(groups.get(2)!.map((i) => i.id)).toEqual(['b', 'd']);
    expect(groups.get(4)!.map((i) => i.id)).toEqual(['e']);
    expect(groupByWeightVersion([]).size).toBe(0);
  });
});
