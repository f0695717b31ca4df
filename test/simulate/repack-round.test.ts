/**
 * The simulated manager's repack round around the real planner: the coordinator's rules (a
 * rollout is a candidate only once its KV use has been seen to fall since the previous round,
 * plans per weight version, groups of one and ineligible rollouts left out) and the real
 * planRepack's moves.
 */
import { describe, expect, it } from 'vitest';
import { planRepack, type RepackLimits } from '../../src/manager/repack/planner.js';
import { RepackRounds, type RoundInput } from '../../src/simulate/manager/repack-round.js';

const limits: RepackLimits = { cMax: 0.99, rooflineBatch: 256 };
const load = (id: string, kvUsed: number, running: number, weightVersion = 0, eligible = true): RoundInput => ({
  id,
  kvUsed,
  running,
  weightVersion,
  eligible,
});

describe('RepackRounds', () => {
  it('moves nothing until a fall in KV use has been seen, then what the planner plans', () => {
    const rounds = new RepackRounds(limits, planRepack);
    expect(rounds.round([load('a', 0.5, 10), load('b', 0.6, 10)])).toEqual([]);
    const moves = rounds.round([load('a', 0.2, 4), load('b', 0.3, 5)]);
    expect(moves).toEqual([{ source: 'a', destination: 'b', weightVersion: 0 }]);
    expect(rounds.plannerCalls).toBe(2);
  });

  it('plans each weight version apart, skipping groups of one and ineligible rollouts', () => {
    const seen: string[][] = [];
    const rounds = new RepackRounds(limits, (group, l) => {
      seen.push(group.map((g) => g.id));
      return planRepack(group, l);
    });
    const first = [load('a', 0.5, 9, 1), load('b', 0.5, 9, 1), load('c', 0.5, 9, 2), load('d', 0.5, 9, 1, false)];
    rounds.round(first);
    const moves = rounds.round([load('a', 0.1, 2, 1), load('b', 0.2, 3, 1), load('c', 0.1, 2, 2), load('d', 0.1, 2, 1, false)]);
    expect(seen).toEqual([
      ['a', 'b'],
      ['a', 'b'],
    ]);
    expect(moves).toEqual([{ source: 'a', destination: 'b', weightVersion: 1 }]);
  });
});
