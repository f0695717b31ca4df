/**
 * One repack round's rules around the planner (paper §5.1-§5.2), as a pure function of the
 * rollouts' loads, so that the manager's RolloutCoordinator (which then sends the moves as NATS
 * commands) and the cluster simulator (src/simulate/) run the very same round:
 *
 * - eligible: a rollout that is available to the caller (alive, reachable, in no move already),
 *   has a weight version and is generating (not loading weights);
 * - C_prev: the KV use the previous round saw for the rollout, else the rollout's own report of
 *   its previous sample; what carries to the next round is this round's eligible rollouts' KV
 *   use, and nothing else (a rollout left out of a round starts over);
 * - groups: per model (each with its own B), then per weight version (repack never mixes
 *   policies); a group of one has nobody to repack with and is not planned.
 *
 * The caller plans each group with `planRepack(group.rollouts, group.limits)` and, for each move,
 * hands over the source's trajectories, or only refreshes its weights when it owns none
 * (`sourceIsEmpty`).
 */
import type { RepackLimits, RepackMove, RolloutLoad } from './planner.js';
import { groupByWeightVersion } from './planner.js';

export interface RoundRollout {
  id: string;
  /** The model profile the rollout reported ('' when none): B is per model. */
  model: string;
  /** null while it has no weights yet. */
  weightVersion: number | null;
  /** Generating (not loading weights). */
  generating: boolean;
  /** The caller's own view: alive, reachable, and not the source or destination of a move in flight. */
  available: boolean;
  /** Fraction of the engine's KV cache in use now. */
  kvUsed: number;
  /** The rollout's own report of its previous KV sample: C_prev when no round has seen it yet. */
  kvPrev: number;
  /** Trajectories the rollout owns (the planner's `running`). */
  owned: number;
}

export interface RepackGroupInput extends RolloutLoad {
  model: string;
  weightVersion: number;
}

export interface RepackGroup {
  model: string;
  weightVersion: number;
  limits: RepackLimits;
  /** At least two, in the order the rollouts were given. */
  rollouts: RepackGroupInput[];
}

export interface RepackRoundPlan {
  groups: RepackGroup[];
  /** C_prev for the next round: the KV use of this round's eligible rollouts. */
  kvAtThisRound: Map<string, number>;
}

export function repackRoundGroups(
  rollouts: readonly RoundRollout[],
  kvAtLastRound: ReadonlyMap<string, number>,
  limits: RepackLimits,
  rooflineBatchByModel?: Readonly<Record<string, number>>,
): RepackRoundPlan {
  const eligible = rollouts.filter((r): r is RoundRollout & { weightVersion: number } => r.available && r.weightVersion !== null && r.generating);
  const inputs: RepackGroupInput[] = eligible.map((r) => ({
    id: r.id,
    model: r.model,
    weightVersion: r.weightVersion,
    kvUsed: r.kvUsed,
    kvPrev: kvAtLastRound.get(r.id) ?? r.kvPrev,
    running: r.owned,
  }));
  const kvAtThisRound = new Map(eligible.map((r) => [r.id, r.kvUsed]));
  const byModel = new Map<string, RepackGroupInput[]>();
  for (const input of inputs) {
    const ofModel = byModel.get(input.model);
    if (ofModel === undefined) byModel.set(input.model, [input]);
    else ofModel.push(input);
  }
  const groups: RepackGroup[] = [];
  for (const [model, ofModel] of byModel) {
    const groupLimits = { cMax: limits.cMax, rooflineBatch: rooflineBatchByModel?.[model] ?? limits.rooflineBatch };
    for (const [weightVersion, group] of groupByWeightVersion(ofModel)) {
      if (group.length < 2) continue;
      groups.push({ model, weightVersion, limits: groupLimits, rollouts: group });
    }
  }
  return { groups, kvAtThisRound };
}

/** A move whose source owns nothing hands nothing over: the source only takes the newest weights. */
export function sourceIsEmpty(group: RepackGroup, move: RepackMove): boolean {
  return (group.rollouts.find((r) => r.id === move.source)?.running ?? 0) === 0;
}
