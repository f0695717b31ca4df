/** The repack round's `dp` planner (src/manager/repack/tool-call-moves.ts): moves of trajectories waiting at tool calls. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { placementMakespan, rooflineInterference } from '../../src/manager/repack/dp-placement.js';
import { planToolCallMoves, type PlacedTrajectory } from '../../src/manager/repack/tool-call-moves.js';

const linear = rooflineInterference(1); // f(s) = s: every trajectory more slows the others

const placedArb = fc
  .array(
    fc.record({
      rollout: fc.constantFrom('r0', 'r1', 'r2'),
      predictedTokens: fc.option(fc.integer({ min: 0, max: 5000 }), { nil: null }),
      atTool: fc.boolean(),
    }),
    { maxLength: 12 },
  )
  .map((ts) => ts.map((t, i): PlacedTrajectory => ({ id: `t${i}`, ...t })));

describe('planToolCallMoves', () => {
  it('spreads a rollout whose trajectories all wait at tools onto an empty one, the longest staying', () => {
    const placed = [100, 200, 300, 400].map((n, i): PlacedTrajectory => ({ id: `t${i}`, rollout: 'a', predictedTokens: n, atTool: true }));
    const plan = planToolCallMoves(placed, ['a', 'b'], linear);
    // {400, 300} stay on a (2 x 400), {200, 100} go to b (2 x 200): 800 instead of 4 x 400.
    expect(plan.moves).toEqual([{ source: 'a', destination: 'b', trajectories: ['t0', 't1'] }]);
    expect([plan.makespanBefore, plan.makespanAfter]).toEqual([1600, 800]);
  });

  it('never moves a generating trajectory, and nothing when no trajectory waits at a tool', () => {
    const generating = [100, 200, 300, 400].map((n, i): PlacedTrajectory => ({ id: `t${i}`, rollout: 'a', predictedTokens: n, atTool: false }));
    expect(planToolCallMoves(generating, ['a', 'b'], linear).moves).toEqual([]);
    // Only the short one waits at a tool: it is the one that moves.
    generating[0]!.atTool = true;
    expect(planToolCallMoves(generating, ['a', 'b'], linear).moves).toEqual([{ source: 'a', destination: 'b', trajectories: ['t0'] }]);
  });

  it('moves nothing that would not lower the makespan (no interference below B: one rollout is as fast as two)', () => {
    const placed = [100, 200, 300, 400].map((n, i): PlacedTrajectory => ({ id: `t${i}`, rollout: 'a', predictedTokens: n, atTool: true }));
    const plan = planToolCallMoves(placed, ['a', 'b'], rooflineInterference(256));
    expect(plan.moves).toEqual([]);
    expect(plan.makespanAfter).toBe(plan.makespanBefore);
  });

  it('moves no trajectory whose re-prefill costs more than the move gains', () => {
    // t0 generates on a; t1 waits at a tool with a long context. Moving t1 to b halves a's
    // decode (2 x 400 -> 400), a gain of 400 token times, but re-prefilling its 2,000 tokens at
    // 0.5 token times each costs b 1,000: it stays where its prefix cache is.
    const placed: PlacedTrajectory[] = [
      { id: 't0', rollout: 'a', predictedTokens: 400, atTool: false, contextTokens: 100 },
      { id: 't1', rollout: 'a', predictedTokens: 300, atTool: true, contextTokens: 2000 },
    ];
    const plan = planToolCallMoves(placed, ['a', 'b'], linear, { reprefillCost: 0.5 });
    expect(plan.moves).toEqual([]);
    expect([plan.makespanBefore, plan.makespanAfter]).toEqual([800, 800]);
    // The same move with a short context pays (300 + 100 on b, 400 on a): it is made.
    placed[1]!.contextTokens = 200;
    const cheap = planToolCallMoves(placed, ['a', 'b'], linear, { reprefillCost: 0.5 });
    expect(cheap.moves).toEqual([{ source: 'a', destination: 'b', trajectories: ['t1'] }]);
    expect([cheap.makespanBefore, cheap.makespanAfter]).toEqual([800, 400]);
  });

  it("keeps the DP's moves that pay for their re-prefill and drops the rest, the costliest first", () => {
    // The DP puts t1 and t2 on b (400 | 300 + 300 = 600, against 3 x 400 = 1,200 on a alone);
    // with t1's 2,000 context tokens b would end at 600 + 1,050. Dropping t1's move (800 on a,
    // 300 + 50 on b) is better; t2's move pays (without it, 1,200).
    const placed: PlacedTrajectory[] = [
      { id: 't0', rollout: 'a', predictedTokens: 400, atTool: false, contextTokens: 100 },
      { id: 't1', rollout: 'a', predictedTokens: 300, atTool: true, contextTokens: 2000 },
      { id: 't2', rollout: 'a', predictedTokens: 300, atTool: true, contextTokens: 100 },
    ];
    expect(planToolCallMoves(placed, ['a', 'b'], linear).moves).toEqual([{ source: 'a', destination: 'b', trajectories: ['t1', 't2'] }]);
    const plan = planToolCallMoves(placed, ['a', 'b'], linear, { reprefillCost: 0.5 });
    expect(plan.moves).toEqual([{ source: 'a', destination: 'b', trajectories: ['t2'] }]);
    expect([plan.makespanBefore, plan.makespanAfter]).toEqual([1200, 800]);
  });

  it('refuses a bad re-prefill cost or context length with ERR_INVALID_ARG', () => {
    const placed: PlacedTrajectory[] = [{ id: 't0', rollout: 'a', predictedTokens: 1, atTool: true, contextTokens: 10 }];
    for (const reprefillCost of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => planToolCallMoves(placed, ['a', 'b'], linear, { reprefillCost })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    }
    placed[0]!.contextTokens = -5;
    expect(() => planToolCallMoves(placed, ['a', 'b'], linear, { reprefillCost: 1 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
  });

  it('properties: with re-prefills charged, the makespan counts them, every move kept pays, and it falls when anything moves', () => {
    const withContext = placedArb.chain((placed) =>
      fc
        .array(fc.integer({ min: 0, max: 3000 }), { minLength: placed.length, maxLength: placed.length })
        .map((ctx) => placed.map((t, i) => ({ ...t, contextTokens: ctx[i]! }))),
    );
    fc.assert(
      fc.property(withContext, fc.integer({ min: 1, max: 3 }), fc.constantFrom(0, 0.01, 0.2, 1), (placed, b, reprefillCost) => {
        const interference = rooflineInterference(b);
        const rollouts = ['r0', 'r1', 'r2'];
        const plan = planToolCallMoves(placed, rollouts, interference, { reprefillCost });
        const destinationOf = new Map(plan.moves.flatMap((m) => m.trajectories.map((id) => [id, m.destination] as const)));
        const makespan = (moved: ReadonlyMap<string, string>): number =>
          Math.max(
            0,
            ...rollouts.map((r) => {
              const here = placed.filter((t) => (moved.get(t.id) ?? t.rollout) === r);
              const decode = placementMakespan([here.map((t) => t.predictedTokens ?? 0)], interference);
              return decode + reprefillCost * here.filter((t) => moved.has(t.id)).reduce((s, t) => s + t.contextTokens, 0);
            }),
          );
        expect(plan.makespanBefore).toBeCloseTo(makespan(new Map()), 9);
        expect(plan.makespanAfter).toBeCloseTo(makespan(destinationOf), 9);
        if (plan.moves.length > 0) expect(plan.makespanAfter).toBeLessThan(plan.makespanBefore);
        // No single move could be dropped without raising the makespan.
        for (const id of destinationOf.keys()) {
          const without = new Map(destinationOf);
          without.delete(id);
          expect(makespan(without)).toBeGreaterThan(plan.makespanAfter - 1e-9);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('properties: only trajectories at tools move, off their own rollout, onto a listed one, and only when the makespan falls', () => {
    fc.assert(
      fc.property(placedArb, fc.integer({ min: 1, max: 3 }), (placed, b) => {
        const interference = rooflineInterference(b);
        const rollouts = ['r0', 'r1', 'r2'];
        const plan = planToolCallMoves(placed, rollouts, interference);
        const byId = new Map(placed.map((t) => [t.id, t]));
        const moved = new Map<string, string>();
        for (const m of plan.moves) {
          expect(m.source).not.toBe(m.destination);
          expect(rollouts).toContain(m.destination);
          for (const id of m.trajectories) {
            expect(byId.get(id)).toMatchObject({ rollout: m.source, atTool: true });
            expect(moved.has(id)).toBe(false);
            moved.set(id, m.destination);
          }
        }
        const groups = rollouts.map((r) => placed.filter((t) => (moved.get(t.id) ?? t.rollout) === r).map((t) => t.predictedTokens ?? 0));
        expect(plan.makespanAfter).toBe(placementMakespan(groups, interference));
        if (plan.moves.length > 0) expect(plan.makespanAfter).toBeLessThan(plan.makespanBefore);
        else expect(plan.makespanAfter).toBe(plan.makespanBefore);
        // The plan depends on the trajectories and rollouts, not on the order they are listed in.
        expect(planToolCallMoves([...placed].reverse(), [...rollouts].reverse(), interference)).toEqual(plan);
      }),
      { numRuns: 300 },
    );
  });
});
