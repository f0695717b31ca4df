/**
 * One repack round of the simulated manager around the real planner (Algorithm 1,
 * src/manager/repack/planner.ts): the same round RolloutCoordinator.repackRound and planGroups
 * run in the manager (src/manager/rollouts/coordinator.ts), written against plain loads because
 * that round lives inside a class that sends NATS requests. Rules copied from it, in its order:
 *
 * - eligible: rollouts generating (not loading weights) and not in a move already;
 * - kvPrev: the KV use this round's caller saw for the rollout at the previous round (the
 *   manager keeps `kvAtLastRound`), else its current use, which the strict comparison never
 *   takes for ramping down; the memory is replaced by this round's eligible rollouts;
 * - groups: by weight version (`groupByWeightVersion`), groups of one skipped; one model per
 *   scenario, so one B;
 * - the plan of each group is `planRepack`'s, taken from `components` so that a test can plant
 *   another planner and see the simulated result move.
 *
 * Left as the design's refactor 3: extract `planRepackRound()` into src/manager/repack/round.ts
 * and have both the coordinator and this file call it, so that the eligibility and kvPrev rules
 * are shared code rather than a copy.
 */
import { groupByWeightVersion, type RepackLimits, type RepackMove, type RolloutLoad } from '../../manager/repack/planner.js';

export type Planner = (rollouts: readonly RolloutLoad[], limits: RepackLimits) => RepackMove[];

export interface RoundInput {
  id: string;
  weightVersion: number;
  /** Fraction of the engine's KV cache in use. */
  kvUsed: number;
  /** Trajectories the rollout owns (running and waiting in its engine): the coordinator's `owned`. */
  running: number;
  /** Generating and not in a move. */
  eligible: boolean;
}

export interface PlannedMove extends RepackMove {
  weightVersion: number;
}

export class RepackRounds {
  private kvAtLastRound = new Map<string, number>();
  rounds = 0;
  plannerCalls = 0;

  constructor(
    private readonly limits: RepackLimits,
    private readonly planner: Planner,
  ) {}

  round(rollouts: readonly RoundInput[]): PlannedMove[] {
    this.rounds++;
    const eligible = rollouts.filter((r) => r.eligible);
    const inputs = eligible.map((r) => ({
      id: r.id,
      weightVersion: r.weightVersion,
      kvUsed: r.kvUsed,
      kvPrev: this.kvAtLastRound.get(r.id) ?? r.kvUsed,
      running: r.running,
    }));
    this.kvAtLastRound = new Map(eligible.map((r) => [r.id, r.kvUsed]));
    const moves: PlannedMove[] = [];
    for (const [weightVersion, group] of groupByWeightVersion(inputs)) {
      if (group.length < 2) continue;
      this.plannerCalls++;
      for (const move of this.planner(group, this.limits)) moves.push({ ...move, weightVersion });
    }
    return moves;
  }
}
