/**
 * Heddle's presorted dynamic-programming placement (§5.2) as pure functions of the trajectories'
 * predicted remaining lengths, beside Algorithm 1 (planner.ts): which trajectories each rollout
 * (worker) should carry so that the predicted makespan is least (issue #49). Not wired into the
 * manager's repack round yet.
 *
 * Heddle's objective (its Formula 2): a worker that carries the group G finishes after
 * f(|G|) · max_{t in G} L(t) · τ, where L is a trajectory's (remaining) length, τ the base
 * per-token time and f the interference factor, a non-decreasing function of the group's size
 * alone (a batch of more sequences makes each step slower); the placement minimises the largest
 * finish time over workers. τ is a constant factor of every term, so it is left out here: the
 * makespan is in token times.
 *
 * Heddle's Lemma 5.1: with the trajectories sorted by descending length, some optimal placement
 * gives each worker a contiguous run of that order (swapping a long trajectory into the group that
 * already holds a longer one never raises a maximum and keeps every size). So only the n − 1 cut
 * points between m runs need choosing, which the dynamic programme below does exactly:
 *
 *   D[1][i] = f(i) · L[0]                (the i longest on one worker; L sorted descending)
 *   D[k][i] = min_j max(D[k−1][j], f(i − j) · L[j])     (trajectories j … i−1 on the k-th worker)
 *
 * A worker may be left empty (j = i): with f non-decreasing, fewer trajectories are never slower.
 * D[k−1][j] never decreases in j and f(i − j) · L[j] never increases, so the best j is where the
 * two cross, found by bisection: O(m · n log n) rather than Heddle's O(m · n²). (Heddle also
 * merges the shortest trajectories into one item to shrink n; not done here.) The heterogeneous
 * workers of Heddle §6 are not modelled: every worker has the same f.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export interface PredictedTrajectory {
  id: string;
  /** Predicted remaining length (tokens), >= 0. */
  predictedTokens: number;
}

/** f(s): how much slower each token is when a worker carries s trajectories (f(1) is 1 by convention). */
export type InterferenceFactor = (groupSize: number) => number;

export interface WorkerAssignment {
  worker: string;
  /** The worker's trajectories, longest first. */
  trajectories: string[];
}

export interface Placement {
  /** One entry per worker, in the order the workers were given. */
  assignments: WorkerAssignment[];
  /** The objective: the largest f(|G|) · max L over workers, in token times. */
  makespan: number;
}

/**
 * Interference from the roofline model of repack (planner.ts, roofline.ts): a decode step costs
 * about the same up to B sequences and grows linearly beyond, so each token of a worker carrying s
 * trajectories takes max(1, s / B) times the time of one alone.
 */
export function rooflineInterference(rooflineBatch: number): InterferenceFactor {
  if (!Number.isSafeInteger(rooflineBatch) || rooflineBatch <= 0) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `rooflineBatch must be a positive integer, got ${String(rooflineBatch)}`, { rooflineBatch });
  }
  return (s) => Math.max(1, s / rooflineBatch);
}

/** Descending predicted length, ties by id (code-unit order, as planner.ts), so plans do not depend on input order. */
export function presort(trajectories: readonly PredictedTrajectory[]): PredictedTrajectory[] {
  return [...trajectories].sort((a, b) => b.predictedTokens - a.predictedTokens || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** Heddle's objective for any placement (of the same trajectories): what the DP minimises. */
export function placementMakespan(groups: readonly (readonly number[])[], interference: InterferenceFactor): number {
  let worst = 0;
  for (const lengths of groups) {
    if (lengths.length === 0) continue;
    worst = Math.max(worst, interference(lengths.length) * Math.max(...lengths));
  }
  return worst;
}

/** The presorted DP. Throws ERR_INVALID_ARG on no workers, duplicate ids, bad lengths or an f that is not non-decreasing. */
export function planDpPlacement(trajectories: readonly PredictedTrajectory[], workers: readonly string[], interference: InterferenceFactor): Placement {
  validatePlacementInput(trajectories, workers);
  const sorted = presort(trajectories);
  const n = sorted.length;
  const m = workers.length;
  const f = interferenceTable(interference, n);
  const len = Float64Array.from(sorted, (t) => t.predictedTokens);
  // cost(j, i): trajectories j … i−1 on one worker.
  const cost = (j: number, i: number): number => (j >= i ? 0 : f[i - j]! * len[j]!);

  let prev = new Float64Array(n + 1);
  for (let i = 1; i <= n; i++) prev[i] = cost(0, i);
  // cut[k][i]: where the k-th worker's run starts in the best placement of the first i trajectories on k + 1 workers.
  const cut: Int32Array[] = [new Int32Array(n + 1)];
  for (let k = 1; k < m; k++) {
    const cur = new Float64Array(n + 1);
    const cutK = new Int32Array(n + 1);
    for (let i = 0; i <= n; i++) {
      // The first j at which prev[j] >= cost(j, i); prev[i] >= cost(i, i) = 0 always holds.
      let lo = 0;
      let hi = i;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (prev[mid]! >= cost(mid, i)) hi = mid;
        else lo = mid + 1;
      }
      let best = lo;
      let bestValue = Math.max(prev[lo]!, cost(lo, i));
      if (lo > 0) {
        const before = Math.max(prev[lo - 1]!, cost(lo - 1, i));
        if (before < bestValue) {
          best = lo - 1;
          bestValue = before;
        }
      }
      cur[i] = bestValue;
      cutK[i] = best;
    }
    cut.push(cutK);
    prev = cur;
  }

  // Walk the cuts back from the last worker; worker 0 gets the longest run.
  const runs: [number, number][] = Array.from({ length: m }, () => [0, 0]);
  let end = n;
  for (let k = m - 1; k >= 0; k--) {
    const start = k === 0 ? 0 : cut[k]![end]!;
    runs[k] = [start, end];
    end = start;
  }
  const assignments = workers.map((worker, k) => ({ worker, trajectories: sorted.slice(runs[k]![0], runs[k]![1]).map((t) => t.id) }));
  return { assignments, makespan: prev[n]! };
}

/** f(0 … n), checked once: finite, positive for non-empty groups, non-decreasing (the premise of Lemma 5.1). */
function interferenceTable(interference: InterferenceFactor, n: number): Float64Array {
  const f = new Float64Array(n + 1);
  for (let s = 1; s <= n; s++) {
    const v = interference(s);
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0 || (s > 1 && v < f[s - 1]!)) {
      throw new InvalidInputError(
        ErrorCodes.INVALID_ARG,
        `interference factor must be positive, finite and non-decreasing in the group size; f(${s}) = ${String(v)}`,
        {
          groupSize: s,
        },
      );
    }
    f[s] = v;
  }
  return f;
}

export function validatePlacementInput(trajectories: readonly PredictedTrajectory[], workers: readonly string[]): void {
  if (workers.length === 0) throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'placement needs at least one worker', {});
  if (new Set(workers).size !== workers.length) throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'a worker is listed twice', { workers: workers.length });
  const seen = new Set<string>();
  for (const t of trajectories) {
    if (seen.has(t.id)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `trajectory ${t.id} is listed twice`, { id: t.id });
    seen.add(t.id);
    if (typeof t.predictedTokens !== 'number' || !Number.isFinite(t.predictedTokens) || t.predictedTokens < 0) {
      throw new InvalidInputError(
        ErrorCodes.INVALID_ARG,
        `trajectory ${t.id}: predicted length must be a finite number >= 0, got ${String(t.predictedTokens)}`,
        {
          id: t.id,
        },
      );
    }
  }
}
