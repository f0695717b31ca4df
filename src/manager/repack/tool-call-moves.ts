/**
 * Moves of agentic trajectories while they wait at tool calls (issue #49, Heddle §5: placement by
 * predicted length, migration during tool calls), the repack round's `dp` planner: a pure
 * function of what the rollouts of one weight-version group report of their trajectories.
 *
 * A trajectory waiting at a tool call holds nothing at any engine (its request has ended, its KV
 * is free), so its next turn may go to another rollout at no cost but the re-prefill of its
 * context there. No generation stops for such a move; a trajectory that is generating is never
 * moved here: it becomes movable at its next tool call.
 *
 * **The objective: engines that decode B at a time and queue the rest.** A rollout's engine
 * decodes at most B sequences at once (its max running requests, or fewer where the agent sends
 * fewer: the heartbeat's `decodeBatch`) and queues the others, so the trajectories G it owns end
 * after about
 *
 *     T(G) = max(max L, Σ L / B) + the re-prefills of what moved onto it
 *
 * token times (L: predicted remaining tokens): its longest trajectory's own path, or its work
 * over its decode slots, whichever is longer (a lower bound that longest-first service, which
 * progressive priority approximates, comes close to). The group's makespan is the largest T over
 * its rollouts. Heddle's `f(|G|) · max L` (f(s) = max(1, s / B), dp-placement.ts) describes an
 * engine that runs its whole batch at once: it is lowered by taking trajectories off the rollout
 * with the longest one, so its presorted DP gathers the long tail on one rollout. On an engine
 * that queues, those long ones then wait behind each other at every turn while the other engine
 * runs dry (docs/performance/agentic.md: `all` below `no-moves` in every round). T counts each
 * trajectory by its work, and spreads the long tail instead. It is not contiguous in the sorted
 * lengths (Heddle's lemma fails for it: a long and a short trajectory may share a rollout while a
 * middle one does not), so the DP does not apply; it is searched instead:
 *
 * 1. Exact, when the moves are few (rollouts^(trajectories at tools) ≤ `exactUpTo`): every
 *    assignment of the trajectories at tools, branch and bound; the best makespan, then the least
 *    re-prefill, then the fewest moves.
 * 2. Otherwise a local search from where they are: the move of a trajectory at a tool off the
 *    slowest rollout, or its swap with one at a tool elsewhere, that most lowers the two
 *    rollouts' times, until none does; a trajectory back on its own rollout costs nothing.
 * 3. The moves found are pruned, the costliest re-prefill first, while dropping one does not raise
 *    the makespan: a trajectory stays where its prefix cache is unless moving it pays.
 * 4. They are made only when they lower the group's makespan: a plan that gains nothing costs
 *    re-prefills for nothing, and would churn round after round.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export interface PlacedTrajectory {
  id: string;
  /** The rollout that owns it now. */
  rollout: string;
  /** Predicted remaining output tokens (null: no prediction, taken as 0). */
  predictedTokens: number | null;
  /** Waiting at a tool call (nothing at the engine): the only ones that move. */
  atTool: boolean;
  /**
   * Tokens of its context (prompt, generated turns and observations): what a move re-prefills at
   * the destination. Absent or null (an agent that does not report it): the move is taken as free.
   */
  contextTokens?: number | null;
}

export interface ToolCallMoveOptions {
  /**
   * Decode-token times one re-prefilled context token costs (prefill time per token over the
   * decode step's time); 0 (default): moves are free, as before context lengths were reported.
   */
  reprefillCost?: number;
  /**
   * Per rollout, the sequences its engine decodes at once (the heartbeat's `decodeBatch`); a
   * rollout not listed has the call's `decodeBatch`.
   */
  decodeBatchOf?: Readonly<Record<string, number>>;
  /** The exact search runs while rollouts^(trajectories at tools) is at most this. Default 4,096. */
  exactUpTo?: number;
}

export interface ToolCallMove {
  source: string;
  destination: string;
  /** Trajectories at tool calls to hand from source to destination. */
  trajectories: string[];
}

export interface ToolCallPlan {
  moves: ToolCallMove[];
  /** The group's predicted makespan (token times, re-prefills included) as it is, and after the moves (equal when none). */
  makespanBefore: number;
  makespanAfter: number;
}

const byCodeUnit = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
const EPS = 1e-9;
const DEFAULT_EXACT_UP_TO = 4096;

/**
 * The tool-call moves of one group. `rollouts` are the group's rollouts that may take part; a
 * trajectory owned by another is ignored. `decodeBatch`: the sequences an engine decodes at once
 * where `options.decodeBatchOf` does not say (a positive integer). Throws ERR_INVALID_ARG on duplicate trajectory ids, bad predictions, context
 * lengths or decode batches, or a bad `reprefillCost`.
 */
export function planToolCallMoves(
  trajectories: readonly PlacedTrajectory[],
  rollouts: readonly string[],
  decodeBatch: number,
  options: ToolCallMoveOptions = {},
): ToolCallPlan {
  const reprefillCost = validReprefillCost(options.reprefillCost ?? 0);
  const fallback = validDecodeBatch(decodeBatch, 'decodeBatch');
  const workers = [...new Set(rollouts)].sort(byCodeUnit);
  const batchOf = workers.map((w) => (options.decodeBatchOf?.[w] === undefined ? fallback : validDecodeBatch(options.decodeBatchOf[w], `decodeBatchOf.${w}`)));
  const placed = trajectories.filter((t) => workers.includes(t.rollout)).sort((a, b) => byCodeUnit(a.id, b.id));
  const seen = new Set<string>();
  for (const t of placed) {
    if (seen.has(t.id)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `duplicate trajectory id ${t.id}`, { id: t.id });
    seen.add(t.id);
    const n = t.predictedTokens ?? 0;
    if (typeof n !== 'number' || !Number.isFinite(n) || n < 0) {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `trajectory ${t.id}: predicted length must be a finite number >= 0, got ${String(n)}`, { id: t.id });
    }
  }
  const home = placed.map((t) => workers.indexOf(t.rollout));
  const length = placed.map((t) => t.predictedTokens ?? 0);
  const cost = placed.map((t) => reprefillCost * contextTokensOf(t));
  const objective = new Objective(workers.length, batchOf, home, length, cost);
  const at = home.slice();
  const before = objective.makespan(at);
  const none: ToolCallPlan = { moves: [], makespanBefore: before, makespanAfter: before };
  const movable = placed.flatMap((t, i) => (t.atTool ? [i] : []));
  if (workers.length < 2 || movable.length === 0) return none;

  const exactUpTo = options.exactUpTo ?? DEFAULT_EXACT_UP_TO;
  const best = movable.length * Math.log(workers.length) <= Math.log(exactUpTo) + EPS ? exactSearch(objective, movable) : localSearch(objective, movable);
  const after = pruneMoves(objective, best);
  if (!(after < before - EPS)) return none;

  const moves = new Map<string, ToolCallMove>();
  placed.forEach((t, i) => {
    if (best[i] === home[i]) return;
    const destination = workers[best[i]!]!;
    const key = `${t.rollout}\u0000${destination}`;
    let move = moves.get(key);
    if (move === undefined) {
      move = { source: t.rollout, destination, trajectories: [] };
      moves.set(key, move);
    }
    move.trajectories.push(t.id);
  });
  const ordered = [...moves.values()].sort((a, b) => byCodeUnit(a.source, b.source) || byCodeUnit(a.destination, b.destination));
  return { moves: ordered, makespanBefore: before, makespanAfter: after };
}

/**
 * Whether a round should plan at all: some rollout has fewer trajectories ready for its engine
 * (owned and not at a tool call) than its engine decodes at once. A move shortens the group only
 * by giving work to an engine that would otherwise have free decode slots; while every engine is
 * full, the agents' claims keep them so for as long as the prompt pool has work, and a move only
 * reshuffles who owns what, at a re-prefill and a resubmitted call each (the objective above sees
 * what the rollouts own, not what they will claim: docs/performance/agentic.md measured 41-46
 * such moves a batch keeping `all` below `no-moves`). Arguments as planToolCallMoves'.
 */
export function someEngineShort(
  trajectories: readonly PlacedTrajectory[],
  rollouts: readonly string[],
  decodeBatch: number,
  decodeBatchOf: Readonly<Record<string, number>> = {},
): boolean {
  return rollouts.some((r) => trajectories.filter((t) => t.rollout === r && !t.atTool).length < (decodeBatchOf[r] ?? decodeBatch));
}

/** T per rollout and the group's makespan for an assignment (`at[i]`: trajectory i's rollout index). */
class Objective {
  constructor(
    readonly rollouts: number,
    readonly batch: readonly number[],
    readonly home: readonly number[],
    readonly length: readonly number[],
    readonly cost: readonly number[],
  ) {}

  /** Each rollout's T: max(max L, Σ L / B) + the re-prefills of what moved onto it. */
  times(at: readonly number[]): number[] {
    const longest = new Array<number>(this.rollouts).fill(0);
    const work = new Array<number>(this.rollouts).fill(0);
    const reprefill = new Array<number>(this.rollouts).fill(0);
    at.forEach((r, i) => {
      longest[r] = Math.max(longest[r]!, this.length[i]!);
      work[r] = work[r]! + this.length[i]!;
      if (r !== this.home[i]) reprefill[r] = reprefill[r]! + this.cost[i]!;
    });
    return longest.map((l, r) => Math.max(l, work[r]! / this.batch[r]!) + reprefill[r]!);
  }

  makespan(at: readonly number[]): number {
    return Math.max(0, ...this.times(at));
  }

  /** Re-prefill paid and trajectories moved. */
  moved(at: readonly number[]): { cost: number; count: number } {
    let cost = 0;
    let count = 0;
    at.forEach((r, i) => {
      if (r === this.home[i]) return;
      cost += this.cost[i]!;
      count++;
    });
    return { cost, count };
  }
}

/** a better than b: lower makespan, then less re-prefill, then fewer moves. */
function better(o: Objective, a: readonly number[], aMakespan: number, b: readonly number[], bMakespan: number): boolean {
  if (aMakespan < bMakespan - EPS) return true;
  if (aMakespan > bMakespan + EPS) return false;
  const ma = o.moved(a);
  const mb = o.moved(b);
  if (ma.cost < mb.cost - EPS) return true;
  if (ma.cost > mb.cost + EPS) return false;
  return ma.count < mb.count;
}

/**
 * Every assignment of the movable trajectories (longest first, each trying its own rollout first),
 * pruned where a rollout's T so far already reaches the best makespan found (T only grows as
 * trajectories are added). The best by `better`; the first found among equals.
 */
function exactSearch(o: Objective, movable: readonly number[]): number[] {
  const order = [...movable].sort((a, b) => o.length[b]! - o.length[a]! || a - b);
  const at = o.home.slice();
  // The fixed ones (generating) first: what every assignment starts from.
  const longest = new Array<number>(o.rollouts).fill(0);
  const work = new Array<number>(o.rollouts).fill(0);
  const reprefill = new Array<number>(o.rollouts).fill(0);
  o.home.forEach((r, i) => {
    if (order.includes(i)) return;
    longest[r] = Math.max(longest[r]!, o.length[i]!);
    work[r] = work[r]! + o.length[i]!;
  });
  let best = o.home.slice();
  let bestMakespan = o.makespan(best);
  const time = (r: number): number => Math.max(longest[r]!, work[r]! / o.batch[r]!) + reprefill[r]!;
  const visit = (k: number): void => {
    if (k === order.length) {
      const m = o.makespan(at);
      if (better(o, at, m, best, bestMakespan)) {
        best = at.slice();
        bestMakespan = m;
      }
      return;
    }
    const i = order[k]!;
    const rs = [o.home[i]!, ...Array.from({ length: o.rollouts }, (_, r) => r).filter((r) => r !== o.home[i])];
    for (const r of rs) {
      const saved = [longest[r]!, work[r]!, reprefill[r]!];
      longest[r] = Math.max(longest[r]!, o.length[i]!);
      work[r] = work[r]! + o.length[i]!;
      if (r !== o.home[i]) reprefill[r] = reprefill[r]! + o.cost[i]!;
      at[i] = r;
      // Equal makespans may still win on re-prefill or moves: prune only what is strictly worse.
      if (time(r) <= bestMakespan + EPS) visit(k + 1);
      [longest[r], work[r], reprefill[r]] = saved as [number, number, number];
    }
    at[i] = o.home[i]!;
  };
  visit(0);
  return best;
}

/** Swaps are tried while (trajectories at tools on the bottleneck) × (all at tools) stays below this; moves alone beyond. */
const SWAP_PAIRS_UP_TO = 50_000;

/** Is the pair (a1, a2) below (b1, b2), each taken largest first, by more than EPS somewhere? */
function pairBelow(a1: number, a2: number, b1: number, b2: number): boolean {
  const [ah, al] = a1 >= a2 ? [a1, a2] : [a2, a1];
  const [bh, bl] = b1 >= b2 ? [b1, b2] : [b2, b1];
  if (ah < bh - EPS) return true;
  if (ah > bh + EPS) return false;
  return al < bl - EPS;
}

/**
 * From where they are: repeatedly the move of one trajectory at a tool off the bottleneck rollout
 * (the largest T), or its swap with one at a tool elsewhere, that most lowers the two rollouts'
 * times taken largest first, until none does. Each step lowers the rollouts' times taken largest
 * first lexicographically (changing two entries of that vector compares as the two entries do),
 * so it ends. A candidate is evaluated in O(1) from each rollout's two longest, work and
 * re-prefill; a step costs O(at tools on the bottleneck × (rollouts + at tools)), swaps left out
 * past SWAP_PAIRS_UP_TO (the simulator's rounds hold thousands of trajectories).
 */
function localSearch(o: Objective, movable: readonly number[]): number[] {
  const at = o.home.slice();
  const R = o.rollouts;
  const isMovable = new Array<boolean>(at.length).fill(false);
  for (const i of movable) isMovable[i] = true;
  const top1 = new Array<number>(R);
  const top1Of = new Array<number>(R);
  const top2 = new Array<number>(R);
  const work = new Array<number>(R);
  const reprefill = new Array<number>(R);
  const refresh = (): void => {
    top1.fill(0);
    top1Of.fill(-1);
    top2.fill(0);
    work.fill(0);
    reprefill.fill(0);
    at.forEach((r, i) => {
      const l = o.length[i]!;
      if (l > top1[r]! || top1Of[r] === -1) {
        top2[r] = top1Of[r] === -1 ? 0 : top1[r]!;
        top1[r] = l;
        top1Of[r] = i;
      } else if (l > top2[r]!) top2[r] = l;
      work[r] = work[r]! + l;
      if (r !== o.home[i]) reprefill[r] = reprefill[r]! + o.cost[i]!;
    });
  };
  const costOn = (i: number, r: number): number => (r === o.home[i] ? 0 : o.cost[i]!);
  /** T of rollout r with trajectory `out` (or -1) taken off it and `into` (or -1) put on it. */
  const timeWith = (r: number, out: number, into: number): number => {
    let longest = out !== -1 && top1Of[r] === out ? top2[r]! : top1[r]!;
    let w = work[r]!;
    let re = reprefill[r]!;
    if (out !== -1) {
      w -= o.length[out]!;
      re -= costOn(out, r);
    }
    if (into !== -1) {
      longest = Math.max(longest, o.length[into]!);
      w += o.length[into]!;
      re += costOn(into, r);
    }
    return Math.max(longest, w / o.batch[r]!) + re;
  };
  for (let steps = 0; steps < 4 * movable.length + 16; steps++) {
    refresh();
    const times = Array.from({ length: R }, (_, r) => timeWith(r, -1, -1));
    let b = 0;
    for (let r = 1; r < R; r++) if (times[r]! > times[b]! + EPS) b = r;
    const onB = movable.filter((i) => at[i] === b);
    const trySwaps = onB.length * movable.length <= SWAP_PAIRS_UP_TO;
    const found: { best: { i: number; j: number; r: number; hi: number; lo: number } | null } = { best: null };
    const consider = (i: number, j: number, r: number): void => {
      const tb = timeWith(b, i, j);
      const tr = timeWith(r, j, i);
      if (!pairBelow(tb, tr, times[b]!, times[r]!)) return;
      const hi = Math.max(tb, tr);
      const lo = Math.min(tb, tr);
      const best = found.best;
      if (best === null || hi < best.hi - EPS || (hi <= best.hi + EPS && lo < best.lo - EPS)) found.best = { i, j, r, hi, lo };
    };
    for (const i of onB) {
      for (let r = 0; r < R; r++) if (r !== b) consider(i, -1, r);
      if (!trySwaps) continue;
      for (const j of movable) if (at[j] !== b) consider(i, j, at[j]!);
    }
    const step = found.best;
    if (step === null) break;
    at[step.i] = step.r;
    if (step.j !== -1) at[step.j] = b;
  }
  return at;
}

/**
 * Sends back home (in place), the costliest re-prefill first (ties by index: id order), each
 * moved trajectory whose return does not raise the makespan: what is left moves only where it
 * pays. Returns the makespan of what is left.
 */
function pruneMoves(o: Objective, at: number[]): number {
  let current = o.makespan(at);
  const costliestFirst = at.flatMap((r, i) => (r === o.home[i] ? [] : [i])).sort((a, b) => o.cost[b]! - o.cost[a]! || a - b);
  // Until a pass drops nothing: a move kept early may stop paying once a later one is dropped.
  for (let dropped = true; dropped;) {
    dropped = false;
    for (const i of costliestFirst) {
      const destination = at[i]!;
      if (destination === o.home[i]) continue;
      at[i] = o.home[i]!;
      const without = o.makespan(at);
      if (without <= current + EPS) {
        current = Math.min(current, without);
        dropped = true;
      } else at[i] = destination;
    }
  }
  return o.makespan(at);
}

/** B: a positive integer; ERR_INVALID_ARG otherwise. */
function validDecodeBatch(b: number | undefined, name: string): number {
  if (typeof b !== 'number' || !Number.isSafeInteger(b) || b <= 0) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${name} must be a positive integer, got ${String(b)}`, { [name]: b });
  }
  return b;
}

function contextTokensOf(t: PlacedTrajectory): number {
  const n = t.contextTokens ?? 0;
  if (typeof n !== 'number' || !Number.isFinite(n) || n < 0) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `trajectory ${t.id}: context length must be a finite number >= 0, got ${String(n)}`, { id: t.id });
  }
  return n;
}

/** `cost` when it is a finite number >= 0; ERR_INVALID_ARG otherwise. */
export function validReprefillCost(cost: number): number {
  if (typeof cost !== 'number' || !Number.isFinite(cost) || cost < 0) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `reprefillCost must be a finite number >= 0, got ${String(cost)}`, { reprefillCost: cost });
  }
  return cost;
}
