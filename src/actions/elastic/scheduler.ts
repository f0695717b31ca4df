/**
 * Per-kind degree of parallelism for the action service: ARL-Tangram's Algorithm 1 ("Elastic
 * Resource Scheduling", §4.2: FCFS candidates, greedy allocation, greedy eviction of the last
 * candidate while the approximated objective falls), applied to worker pools rather than to
 * single actions. A kind plays the part of one elastic action: its key elasticity resource is
 * its worker count, its minimum requirement one worker, and its objective the approximated ACT
 * sum of its queue (act-model.ts).
 *
 * Where this departs from the paper, and why:
 * - DPArrange is replaced by greedy marginal allocation (one worker at a time to the kind whose
 *   next worker saves the most ACT per dominant share of the budget). A worker costs a vector
 *   (cores, memory, API calls), not units of one resource, and the per-kind objective is convex
 *   in the worker count, where greedy on marginal gains matches the DP for one dimension.
 * - The kinds left out start when the candidates' first worker frees (the next round, then the
 *   end of its action: freeTimes), not when a candidate's whole pool drains: the supervisor plans
 *   again every round, where a kind with work left out is queued and gets a worker.
 * - Eviction never takes the last worker from a kind with queued work (the paper's FCFS exists to
 *   avoid starvation; a pool with no worker starves until the next round). Eviction therefore
 *   decides whether kinds expecting arrivals but holding no queue keep a warm worker.
 *
 * Pure: observations in, targets out; the supervisor (supervisor.ts) does the I/O.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { demand, drainSumMs, kindActSumMs, type KindLoad } from './act-model.js';
import { addTimes, checkResources, dominantShare, fits, NO_RESOURCES, type Resources } from './resources.js';

export interface KindObservation extends KindLoad {
  kind: string;
  /** What one worker of the kind costs. */
  cost: Resources;
  /** Never more workers than this (a configured ceiling); unlimited when absent. */
  maxWorkers?: number;
  /** How long the oldest queued action has waited: the FCFS order among kinds (longest first). */
  oldestWaitMs?: number;
}

export interface ElasticPlan {
  /** Target workers per kind (every observed kind, 0 included). */
  targets: Record<string, number>;
  /** What the targets cost together (never above the budget). */
  used: Resources;
  /** Kinds with work that the greedy eviction left without a worker this round. */
  evicted: string[];
  /** Kinds with work whose single worker does not fit the budget at all. */
  unfit: string[];
  /** The approximated ACT sum (ms) of the chosen plan over the horizon. */
  objectiveMs: number;
}

export interface ScheduleOptions {
  /** How far ahead arrivals are counted as demand (ms); the supervisor's period is a good value. */
  horizonMs?: number;
}

export const DEFAULT_HORIZON_MS = 10_000;

function checkObservation(o: KindObservation): void {
  const bad = (field: string, v: unknown): never => {
    throw new InvalidInputError(ErrorCodes.BAD_ELASTIC_INPUT, `kind ${o.kind}: ${field} must be a finite number >= 0, got ${String(v)}`, {
      field,
      kind: o.kind,
    });
  };
  for (const field of ['queued', 'arrivalPerSec', 'execMs'] as const) {
    const v = o[field];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) bad(field, v);
  }
  if (o.maxWorkers !== undefined && !(Number.isInteger(o.maxWorkers) && o.maxWorkers >= 0)) bad('maxWorkers', o.maxWorkers);
  checkResources(o.cost, `cost[${o.kind}]`, false);
}

/**
 * When each worker of the candidates could first serve a kind left out. The paper's candidates
 * are single actions, whose resources come back when they complete; a kind's pool is kept by the
 * plan only until the next round, where a kind left out that has work is queued and gets a worker
 * (line 2 below), the first one that ends its action. So a worker frees at the next round (the
 * horizon) if idle, else when its action ends: with `busy` workers on actions of `execMs` whose
 * residuals spread evenly, the j-th ends about j·execMs/(busy + 1) in. (Counting the whole pool's
 * drain instead, as for single actions, priced a kind left out at seconds of waiting where the
 * supervisor gives it a worker within a round and an action, and kept warm workers for a trickle
 * of arrivals while another kind's burst waited.)
 */
function freeTimes(candidates: KindObservation[], workers: number[], horizonMs: number): number[] {
  return candidates.flatMap((k, i) => {
    const w = workers[i]!;
    const busy = Math.min(w, k.queued);
    return Array.from({ length: w }, (_, j) => horizonMs + (j < busy ? ((j + 1) * k.execMs) / (busy + 1) : 0));
  });
}

/**
 * The paper's "remaining actions" estimate: kinds left out start, one worker each, when the
 * earliest candidate worker frees (a completion heap), in FCFS order.
 */
function restActSumMs(rest: KindObservation[], frees: number[], horizonMs: number): number {
  const heap = [...frees];
  let sum = 0;
  for (const k of rest) {
    const n = demand(k, horizonMs);
    if (n === 0) continue;
    if (heap.length === 0) return Infinity;
    heap.sort((a, b) => a - b);
    const start = heap.shift()!;
    sum += start * n + drainSumMs(n, 1, k.execMs);
    heap.push(start + n * k.execMs);
  }
  return sum;
}

interface Allocation {
  workers: number[];
  used: Resources;
  objectiveMs: number;
}

/**
 * Greedy allocation over `candidates` (one worker each to start, then the best marginal gain
 * per dominant share until nothing fits or nothing gains), and the approximated objective with
 * `rest` queued behind them.
 */
function allocate(candidates: KindObservation[], rest: KindObservation[], budget: Resources, horizonMs: number): Allocation {
  const workers = candidates.map(() => 1);
  let used = candidates.reduce((u, k) => addTimes(u, k.cost), { ...NO_RESOURCES });
  const ceiling = candidates.map((k) => Math.min(k.maxWorkers ?? Infinity, demand(k, horizonMs)));
  for (;;) {
    let best = -1;
    let bestScore = 0;
    candidates.forEach((k, i) => {
      if (workers[i]! >= ceiling[i]! || !fits(used, k.cost, budget)) return;
      const gain = kindActSumMs(k, workers[i]!, horizonMs) - kindActSumMs(k, workers[i]! + 1, horizonMs);
      if (gain <= 0) return;
      const share = dominantShare(k.cost, budget);
      const score = share === 0 ? Infinity : gain / share;
      if (score > bestScore) {
        best = i;
        bestScore = score;
      }
    });
    if (best < 0) break;
    workers[best]!++;
    used = addTimes(used, candidates[best]!.cost);
  }
  const own = candidates.reduce((s, k, i) => s + kindActSumMs(k, workers[i]!, horizonMs), 0);
  return { workers, used, objectiveMs: own + restActSumMs(rest, freeTimes(candidates, workers, horizonMs), horizonMs) };
}

/** FCFS among kinds: queued work first, longest-waiting first; then kinds expecting arrivals. */
function fcfsOrder(kinds: KindObservation[]): KindObservation[] {
  const queued = kinds.filter((k) => k.queued > 0);
  const arriving = kinds.filter((k) => k.queued === 0);
  queued.sort((a, b) => (b.oldestWaitMs ?? 0) - (a.oldestWaitMs ?? 0));
  return [...queued, ...arriving];
}

export function scheduleElastic(observations: KindObservation[], budget: Resources, options: ScheduleOptions = {}): ElasticPlan {
  const horizonMs = options.horizonMs ?? DEFAULT_HORIZON_MS;
  if (!Number.isFinite(horizonMs) || horizonMs < 0) {
    throw new InvalidInputError(ErrorCodes.BAD_ELASTIC_INPUT, `horizonMs must be a finite number >= 0, got ${horizonMs}`, { field: 'horizonMs' });
  }
  checkResources(budget, 'budget', true);
  const seen = new Set<string>();
  for (const o of observations) {
    checkObservation(o);
    if (seen.has(o.kind)) throw new InvalidInputError(ErrorCodes.BAD_ELASTIC_INPUT, `kind ${o.kind} is observed twice`, { field: 'kind', kind: o.kind });
    seen.add(o.kind);
  }
  const targets: Record<string, number> = Object.fromEntries(observations.map((o) => [o.kind, 0]));
  const withWork = observations.filter((o) => demand(o, horizonMs) > 0 && (o.maxWorkers ?? 1) > 0);
  const unfit = withWork.filter((o) => !fits(NO_RESOURCES, o.cost, budget)).map((o) => o.kind);
  const waiting = fcfsOrder(withWork.filter((o) => !unfit.includes(o.kind)));

  // Line 2: the longest FCFS prefix that fits at one worker each.
  let used: Resources = { ...NO_RESOURCES };
  let n = 0;
  while (n < waiting.length && fits(used, waiting[n]!.cost, budget)) used = addTimes(used, waiting[n++]!.cost);

  // Lines 7-12: evict the last candidate while that lowers the approximated objective.
  let best = allocate(waiting.slice(0, n), waiting.slice(n), budget, horizonMs);
  let kept = n;
  while (kept > 0 && waiting[kept - 1]!.queued === 0) {
    const next = allocate(waiting.slice(0, kept - 1), waiting.slice(kept - 1), budget, horizonMs);
    if (next.objectiveMs >= best.objectiveMs) break;
    best = next;
    kept--;
  }
  waiting.slice(0, kept).forEach((k, i) => (targets[k.kind] = best.workers[i]!));
  return {
    targets,
    used: best.used,
    evicted: waiting.slice(kept).map((k) => k.kind),
    unfit,
    objectiveMs: best.objectiveMs,
  };
}
