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
