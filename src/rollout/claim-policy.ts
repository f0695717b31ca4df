/**
 * When a rollout claims prompts, and how many: the rule of `laminar rollout-agent`'s serve loop
 * (src/rollout-agent/agent.ts), pure, so that the cluster simulator's rollouts
 * (src/simulate/systems/laminar.ts) follow the very same rule rather than a copy of it.
 *
 * Two modes, by `maxInFlight`:
 * - 0, batch mode (the paper's rollout loop, §3.2 and §6): claim `batchPrompts` prompts, generate
 *   until all are done, take the newest weights, claim again;
 * - N > 0, continuous mode: keep up to N trajectories generating, claiming as they finish, as long
 *   as no newer version waits; when one does, claim nothing more until the engine is empty, load
 *   it, and go on (a trajectory keeps one version from its first token to its last).
 *
 * Multi-turn (tool-calling) trajectories: one waiting at a tool call holds nothing at the engine,
 * so it does not count against `maxInFlight`; the engine is kept busy with other work meanwhile.
 * What the rollout owns in all (generating, in line for the engine, at tools) stays bounded by
 * `maxInFlight + maxAtTools`, so that it does not claim without end while tools are slow.
 *
 *   if (mustEmptyFirst(policy, inFlight, newerWaiting)) wait until the engine is empty;
 *   else { if (newerWaiting) load it; const n = promptsToClaim(policy, inFlight, perPrompt); n > 0 ? claim(n) : wait for a finish }
 */

export interface ClaimPolicy {
  /** Prompts claimed at once at most (each brings its group of samples). */
  batchPrompts: number;
  /** 0: batch mode; N > 0: keep up to N trajectories in flight (continuous mode). */
  maxInFlight: number;
  /**
   * Continuous mode with tool calls: trajectories owned beyond `maxInFlight` while some wait at
   * tools (owned <= maxInFlight + maxAtTools). Absent or 0: owned <= maxInFlight.
   */
  maxAtTools?: number;
}

/**
 * Nothing new may start until the engine is empty: it has trajectories in flight and either a
 * newer version waits (loaded only when nothing generates) or the rollout runs in batch mode.
 */
export function mustEmptyFirst(policy: ClaimPolicy, inFlight: number, newerWaiting: boolean): boolean {
  return inFlight > 0 && (newerWaiting || policy.maxInFlight === 0);
}

/**
 * Prompts to claim now, once mustEmptyFirst says nothing stands in the way; 0: wait until a
 * trajectory finishes (or goes to a tool). `inFlight` is the trajectories that want the engine
 * (generating or in line for it), `owned` all the rollout owns (those plus the ones at tools;
 * default `inFlight`). `perPrompt` is the samples one prompt brings (its group size).
 *
 * In continuous mode a claim fills at least a quarter of `maxInFlight` (and one whole prompt):
 * one claim per finished trajectory would pay the claim's round trips (Redis, JetStream) for
 * every trajectory on its own.
 */
export function promptsToClaim(policy: ClaimPolicy, inFlight: number, perPrompt: number, owned = inFlight): number {
  if (policy.maxInFlight === 0) return policy.batchPrompts;
  const room = Math.min(policy.maxInFlight - inFlight, policy.maxInFlight + (policy.maxAtTools ?? 0) - owned);
  if (room < Math.max(perPrompt, Math.ceil(policy.maxInFlight / 4))) return 0;
  return Math.max(1, Math.min(policy.batchPrompts, Math.floor(room / perPrompt)));
}
