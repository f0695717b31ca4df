/**
 * The approximated action completion time (ACT) of one kind at a given degree of parallelism:
 * what ARL-Tangram's Algorithm 1 calls getApproximatedObjective, for worker pools instead of
 * single elastic actions. A kind's w workers serve its queue first come first served, one action
 * each at a time, so the j-th queued action (0-based) finishes after floor(j / w) + 1 executions.
 * Arrivals expected within the planning horizon are counted as queued too: a pool too small for
 * its arrival rate then shows as a growing sum, not as a steady state it never reaches.
 */

export interface KindLoad {
  /** Actions waiting now. */
  queued: number;
  /** Actions arriving per second (recent average). */
  arrivalPerSec: number;
  /** Mean execution time of one action, milliseconds. */
  execMs: number;
}

/** Actions the pool must serve over the horizon: the queue plus the expected arrivals. */
export function demand(load: KindLoad, horizonMs: number): number {
  return load.queued + Math.ceil((load.arrivalPerSec * horizonMs) / 1000);
}

/**
 * Sum of completion times (ms) of `n` actions of `execMs` each on `workers` workers, FCFS, all
 * ready at time 0. Infinity with no worker and work to do: an evicted kind's actions do not
 * finish within the horizon (the caller prices that).
 */
export function drainSumMs(n: number, workers: number, execMs: number): number {
  if (n <= 0) return 0;
  if (workers <= 0) return Infinity;
  const fullWaves = Math.floor(n / workers);
  const rest = n - fullWaves * workers;
  // Wave k (1-based) of `workers` actions finishes at k * execMs.
  return execMs * ((workers * fullWaves * (fullWaves + 1)) / 2 + rest * (fullWaves + 1));
}

/** Approximated ACT sum of a kind with `workers` workers over the horizon. */
export function kindActSumMs(load: KindLoad, workers: number, horizonMs: number): number {
  return drainSumMs(demand(load, horizonMs), workers, load.execMs);
}
