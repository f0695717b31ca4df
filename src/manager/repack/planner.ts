/**
 * The repack planner (paper §5.2, Algorithm 1, Best-Fit Trajectory Consolidation) as pure
 * functions of the rollouts' progress metrics, so that the plan is tested without engines: which
 * rollouts are in ramp-down, which of them hand their unfinished trajectories to which, and what
 * each rollout carries once the plan has run.
 *
 * Rules:
 * - candidates are rollouts whose KV cache use fell below both C_max and their previous sample,
 *   and that run fewer than B requests (line 3);
 * - the smallest candidates are released first (line 4): they are the easiest to place;
 * - each one goes to the feasible candidate that is densest after the move (best fit, line 11),
 *   which keeps the roomier ones for bigger workloads;
 * - a destination never becomes a source in the same plan, and a source never a destination;
 * - the plan depends only on the set of rollouts, not on the order they are listed in.
 *
 * KV use is a fraction of one engine's cache and is added across engines as is: repack runs
 * within a weight-version group, whose rollouts run the same model on the same shape of engine.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export interface RolloutLoad {
  id: string;
  /** Fraction of the engine's KV cache in use now, in [0, 1]. */
  kvUsed: number;
  /**
   * The same at the previous sample. A rollout without one should pass its kvUsed: the
   * comparison is strict, so it is not taken for ramping down until usage has been seen to fall.
   */
  kvPrev: number;
  /** Requests (trajectories) the engine is running. */
  running: number;
}

export interface RepackLimits {
  /** KV cache use at which an engine counts as full (C_max). */
  cMax: number;
  /**
   * B: the most trajectories an engine decodes in parallel with only a negligible increase in
   * step latency, where decode turns from memory-bound to compute-bound (roofline.ts says how to
   * measure it).
   */
  rooflineBatch: number;
}

/**
 * C_max is the paper's (99% of the KV cache: a rollout at it is full, its waiting requests take
 * any space that frees up).
 *
 * B = 256 is the roofline model's estimate for a dense model with 16-bit weights on the paper's
 * GPUs (H800; the same for H100 SXM). A decode step reads every weight once (2 bytes) and does 2
 * FLOPs per weight per running sequence, so its arithmetic intensity is about B FLOP/byte; it
 * turns compute-bound at the GPU's ridge point, peak FLOP/s over memory bandwidth: 989 TFLOP/s /
 * 3.35 TB/s ≈ 295 FLOP/byte. 256 is that rounded down to a power of two. It is an upper
 * estimate: attention reads each sequence's KV cache, which grows with the batch and stays
 * memory-bound, and kernels fall short of peak, so a measured knee comes earlier, the more so
 * with long contexts (the paper's Figure 4: a batch of 64 decodes about as fast as one of 8;
 * the simulated engine models B = 64). Other GPUs, dtypes and parallelism move it: measure B for
 * the job's engine (roofline.ts) and pass it with `laminar manager --roofline-batch`.
 */
export const DEFAULT_REPACK_LIMITS: Readonly<RepackLimits> = Object.freeze({ cMax: 0.99, rooflineBatch: 256 });

export interface RepackMove {
  source: string;
  destination: string;
}

export function validateRepackLimits(limits: RepackLimits): void {
  const { cMax, rooflineBatch } = limits;
  if (typeof cMax !== 'number' || !(cMax > 0 && cMax <= 1)) {
    throw new InvalidInputError(ErrorCodes.REPACK_LIMITS, `cMax must be a fraction of the KV cache in (0, 1], got ${String(cMax)}`, { cMax });
  }
  if (typeof rooflineBatch !== 'number' || !Number.isSafeInteger(rooflineBatch) || rooflineBatch <= 0) {
    throw new InvalidInputError(ErrorCodes.REPACK_LIMITS, `rooflineBatch must be a positive integer, got ${String(rooflineBatch)}`, { rooflineBatch });
  }
}

/** Line 3 of Algorithm 1, in the order of line 4: ascending KV use, ties by id. */
export function repackCandidates(rollouts: readonly RolloutLoad[], limits: RepackLimits): RolloutLoad[] {
  validateRepackLimits(limits);
  // A broken sample (NaN, negative, infinite) fails these comparisons, so that rollout is left
  // alone this round rather than failing the plan of its whole group.
  return rollouts
    .filter((r) => r.kvUsed >= 0 && r.kvUsed < Math.min(limits.cMax, r.kvPrev) && r.running >= 0 && r.running < limits.rooflineBatch)
    .sort(byLoadThenId);
}

function byLoadThenId(a: RolloutLoad, b: RolloutLoad): number {
  // Code-unit order rather than localeCompare: the plan must not depend on the host's locale.
  return a.kvUsed - b.kvUsed || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * Algorithm 1. O(|S|^2) over the candidates S; each destination's load (its own plus what the
 * plan already sends it) is kept as a running sum rather than re-summed from the plan, so one
 * round costs one pass over S per source.
 *
 * Sums are formed in the paper's order, destination first and then its sources in plan order,
 * so `projectLoads` and a literal transcription of the paper reach bit-identical totals.
 */
export function planRepack(rollouts: readonly RolloutLoad[], limits: RepackLimits): RepackMove[] {
  assertUniqueIds(rollouts);
  const s = repackCandidates(rollouts, limits);
  const m = s.length;
  const { cMax, rooflineBatch: b } = limits;
  const kv = new Float64Array(m);
  const n = new Float64Array(m);
  const loadKv = new Float64Array(m);
  const loadN = new Float64Array(m);
  for (let i = 0; i < m; i++) {
    kv[i] = loadKv[i] = s[i]!.kvUsed;
    n[i] = loadN[i] = s[i]!.running;
  }
  // Ties between equally loaded destinations go to the smaller id; ranks avoid string compares in the loop.
  const idRank = new Int32Array(m);
  const byId = Array.from({ length: m }, (_, i) => i).sort((x, y) => (s[x]!.id < s[y]!.id ? -1 : 1));
  for (let r = 0; r < m; r++) idRank[byId[r]!] = r;
  const emptied = new Uint8Array(m);
  const receiving = new Uint8Array(m);
  // The rollouts not yet emptied, in no particular order (ties are settled by id, not by
  // position), so that later scans skip the sources already emptied.
  const open = Int32Array.from({ length: m }, (_, i) => i);
  const at = Int32Array.from({ length: m }, (_, i) => i);
  let openCount = m;
  const plan: RepackMove[] = [];

  for (let i = 0; i < m; i++) {
    if (emptied[i]) continue;
    // The paper's rule that the sources and the destinations partition S: as written, a rollout
    // chosen as a destination is not in E and would come up later as a source, sending on
    // trajectories that are still on their way to it. Read as the invariant it states, a
    // destination keeps what it has been given.
    if (receiving[i]) continue;
    const needKv = kv[i]!;
    const needN = n[i]!;
    let best = -1;
    let bestLoad = -Infinity;
    for (let k = 0; k < openCount; k++) {
      const j = open[k]!;
      if (j === i) continue;
      const load = loadKv[j]!;
      if (load + needKv > cMax || loadN[j]! + needN > b) continue;
      if (load > bestLoad || (load === bestLoad && idRank[j]! < idRank[best]!)) {
        best = j;
        bestLoad = load;
      }
    }
    if (best < 0) continue;
    plan.push({ source: s[i]!.id, destination: s[best]!.id });
    emptied[i] = 1;
    const last = open[--openCount]!;
    open[at[i]!] = last;
    at[last] = at[i]!;
    receiving[best] = 1;
    loadKv[best] = bestLoad + needKv;
    loadN[best] = loadN[best]! + needN;
  }
  return plan;
}

/**
 * Every rollout's load once the plan has run: sources empty, each destination carrying its own
 * load plus its sources'. Throws on a plan the planner would not make (unknown ids, a source
 * moved twice, a chain of moves), since what it would leave behind is not defined.
 */
export function projectLoads(rollouts: readonly RolloutLoad[], plan: readonly RepackMove[]): Map<string, { kvUsed: number; running: number }> {
  assertUniqueIds(rollouts);
  const before = new Map(rollouts.map((r) => [r.id, r]));
  const after = new Map(rollouts.map((r) => [r.id, { kvUsed: r.kvUsed, running: r.running }]));
  const sources = new Set<string>();
  const destinations = new Set<string>();
  for (const { source, destination } of plan) {
    const from = before.get(source);
    const to = after.get(destination);
    if (from === undefined || to === undefined) {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `repack move ${source} -> ${destination} names an unknown rollout`, { source, destination });
    }
    if (source === destination || sources.has(source) || sources.has(destination) || destinations.has(source)) {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `repack move ${source} -> ${destination} moves a rollout twice or chains moves`, {
        source,
        destination,
      });
    }
    sources.add(source);
    destinations.add(destination);
    to.kvUsed += from.kvUsed;
    to.running += from.running;
  }
  for (const id of sources) after.set(id, { kvUsed: 0, running: 0 });
  return after;
}

/** Repack only ever mixes trajectories of one policy version, so it plans per group. Groups and members keep input order. */
export function groupByWeightVersion<T extends { weightVersion: number }>(items: readonly T[]): Map<number, T[]> {
  const groups = new Map<number, T[]>();
  for (const item of items) {
    const group = groups.get(item.weightVersion);
    if (group === undefined) groups.set(item.weightVersion, [item]);
    else group.push(item);
  }
  return groups;
}

function assertUniqueIds(rollouts: readonly RolloutLoad[]): void {
  const seen = new Set<string>();
  for (const r of rollouts) {
    if (seen.has(r.id)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `rollout ${r.id} is listed twice`, { id: r.id });
    seen.add(r.id);
  }
}
