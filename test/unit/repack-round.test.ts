/**
 * One repack round's rules (src/manager/repack/round.ts), which the manager's RolloutCoordinator
 * and the simulator both run: who is eligible, which C_prev each rollout is planned with and what
 * carries to the next round, and which groups go to the planner (per model with its own B, per
 * weight version, never a group of one).
 */
import { describe, expect, it } from 'vitest';
import { planRepack, type RepackLimits } from '../../src/manager/repack/planner.js';
import { repackRoundGroups, sourceIsEmpty, type RoundRollout } from '../../src/manager/repack/round.js';

const limits: RepackLimits = { cMax: 0.99, rooflineBatch: 256 };
const rollout = (id: string, kvUsed: number, owned: number, more: Partial<RoundRollout> = {}): RoundRollout => ({
  id,
  model: 'm',
  weightVersion: 0,
  generating: true,
  available: true,
  kvUsed,
  kvPrev: kvUsed,
  owned,
  ...more,
});
const ids = (plan: ReturnType<typeof repackRoundGroups>): string[][] => plan.groups.map((g) => g.rollouts.map((r) => r.id));

describe('repackRoundGroups', () => {
  it('plans with the previous round’s KV as C_prev, so a fall seen across rounds makes a move', () => {
    const first = repackRoundGroups([rollout('a', 0.5, 10), rollout('b', 0.6, 10)], new Map(), limits);
    expect(first.groups[0]!.rollouts.map((r) => r.kvPrev)).toEqual([0.5, 0.6]);
    expect(planRepack(first.groups[0]!.rollouts, first.groups[0]!.limits)).toEqual([]);
    expect([...first.kvAtThisRound]).toEqual([
      ['a', 0.5],
      ['b', 0.6],
    ]);
    const second = repackRoundGroups([rollout('a', 0.2, 4), rollout('b', 0.3, 5)], first.kvAtThisRound, limits);
    expect(second.groups[0]!.rollouts.map((r) => r.kvPrev)).toEqual([0.5, 0.6]);
    expect(planRepack(second.groups[0]!.rollouts, second.groups[0]!.limits)).toEqual([{ source: 'a', destination: 'b' }]);
  });

  it('falls back on the rollout’s own previous sample when no round has seen it', () => {
    const plan = repackRoundGroups([rollout('a', 0.2, 4, { kvPrev: 0.4 }), rollout('b', 0.3, 5, { kvPrev: 0.5 })], new Map([['b', 0.9]]), limits);
    expect(plan.groups[0]!.rollouts.map((r) => r.kvPrev)).toEqual([0.4, 0.9]);
  });

  it('leaves out rollouts that are unavailable, loading weights or without a version, and forgets their KV', () => {
    const plan = repackRoundGroups(
      [
        rollout('a', 0.1, 2),
        rollout('b', 0.1, 2),
        rollout('busy', 0.1, 2, { available: false }),
        rollout('loading', 0.1, 2, { generating: false }),
        rollout('new', 0.1, 2, { weightVersion: null }),
      ],
      new Map([
        ['busy', 0.9],
        ['gone', 0.9],
      ]),
      limits,
    );
    expect(ids(plan)).toEqual([['a', 'b']]);
    expect([...plan.kvAtThisRound.keys()]).toEqual(['a', 'b']);
  });

  it('groups by model (with its own B) and weight version, skipping groups of one', () => {
    const plan = repackRoundGroups(
      [
        rollout('a', 0.1, 2, { weightVersion: 1 }),
        rollout('x', 0.1, 2, { model: 'big', weightVersion: 1 }),
        rollout('b', 0.1, 2, { weightVersion: 1 }),
        rollout('c', 0.1, 2, { weightVersion: 2 }),
        rollout('y', 0.1, 2, { model: 'big', weightVersion: 1 }),
      ],
      new Map(),
      limits,
      { big: 32 },
    );
    expect(plan.groups.map((g) => [g.model, g.weightVersion, g.limits.rooflineBatch])).toEqual([
      ['m', 1, 256],
      ['big', 1, 32],
    ]);
    expect(ids(plan)).toEqual([
      ['a', 'b'],
      ['x', 'y'],
    ]);
  });

  it('tells a move whose source owns nothing (it only takes the newest weights)', () => {
    const [group] = repackRoundGroups([rollout('a', 0.1, 0), rollout('b', 0.2, 3)], new Map(), limits).groups;
    expect(sourceIsEmpty(group!, { source: 'a', destination: 'b' })).toBe(true);
    expect(sourceIsEmpty(group!, { source: 'b', destination: 'a' })).toBe(false);
  });
});
