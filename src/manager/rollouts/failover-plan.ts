/**
 * Where a dead rollout's trajectories resume (paper §3.3; the coordinator's failover): on a live
 * rollout of the same weight version that is not reinitialising, the one owning the fewest
 * trajectories, then the one with the least KV in use, then the first by id. A pure function of
 * the candidates, so that the manager's coordinator (which filters out rollouts busy in a move or
 * unreachable) and the cluster simulator (src/simulate/) decide alike.
 */
export interface OrphanDestinationCandidate {
  id: string;
  /** null: a rollout that holds no weights yet (never a destination). */
  weightVersion: number | null;
  reinitialising: boolean;
  owned: number;
  kvUsed: number;
}

/** The destination for orphans generated with `version`, or undefined when no candidate fits (they wait). */
export function orphanDestination<T extends OrphanDestinationCandidate>(version: number, candidates: readonly T[]): T | undefined {
  return candidates
    .filter((c) => c.weightVersion === version && !c.reinitialising)
    .sort((a, b) => a.owned - b.owned || a.kvUsed - b.kvUsed || (a.id < b.id ? -1 : 1))[0];
}
