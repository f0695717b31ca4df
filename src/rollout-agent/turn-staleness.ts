/**
 * The per-turn staleness bound (RollArt): a multi-turn trajectory keeps the weight version it
 * started with for all its turns (trajectory-level consistency), and a long episode of tool calls
 * can outlive several versions. At every turn boundary (before the next turn is generated) the
 * agent compares the trajectory's version with the newest version the trainer published (the
 * relay announces each as it completes); more than `maxStaleness` behind, the trajectory is
 * aborted: its sample goes back to the prompt pool, to be generated again with fresh weights.
 *
 * Together with the sampler's bound (`laminar sampler --max-staleness S`, which drops records
 * more than S versions behind the trainer when a batch is drawn): the agent's bound M stops an
 * over-stale trajectory from spending more engine and tool time and from entering the buffer; the
 * sampler's bound is applied again at training time (a record can age in the buffer, and a
 * single-turn trajectory has no turn boundary). Take M <= S: with M > S, trajectories between S
 * and M versions behind are completed only to be dropped by the sampler.
 */

/** True when a trajectory of `version` is over the bound, the trainer at `newest` (null: not known yet, never stale). */
export function staleAtTurn(version: number, newest: number | null, maxStaleness: number | null): boolean {
  if (maxStaleness === null || maxStaleness < 0 || newest === null) return false;
  return newest - version > maxStaleness;
}
