/**
 * Moves of agentic trajectories while they wait at tool calls (issue #49, Heddle §5: placement by
 * predicted length, migration during tool calls), the repack round's `dp` planner: a pure
 * function of what the rollouts of one weight-version group report of their trajectories.
 *
 * A trajectory waiting at a tool call holds nothing at any engine (its request has ended, its KV
 * is free), so its next turn may go to another rollout at no cost but the re-prefill of its
 * context there (4). No generation stops for such a move; a trajectory that is generating is
 * never moved here: it becomes movable at its next tool call.
 *
 * 1. Heddle's presorted DP (dp-placement.ts) places all the group's trajectories (generating ones
 *    included: they weigh on where the others should go) on its rollouts by predicted remaining
 *    tokens (none predicted: 0), with roofline interference (f(s) = max(1, s / B)).
 * 2. The DP's runs are given to rollouts so that as many trajectories as possible stay where they
 *    are (its workers are interchangeable): the run and rollout that share the most generating
 *    trajectories first (those cannot move, so a run sent elsewhere would leave them off the
 *    plan), then the most trajectories, ties by run (longest first) and rollout id. Staying is
 *    preferred: a trajectory that stays keeps the engine's prefix cache of its context.
 * 3. Trajectories at tools whose run is on another rollout move there; nothing else moves.
 * 4. Each move is charged its re-prefill: the destination engine computes the trajectory's whole
 *    context again (its prefix cache is on the source), `reprefillCost` decode-token times per
 *    context token (prefill time per token over a decode step's, measured on the job's engine:
 *    bench/agentic-prefill.ts does it for the reference engine), and that engine time delays
 *    everything on the destination. The DP places by predicted decode alone; its moves are then
 *    pruned, the costliest first, while dropping one does not raise the makespan with the
 *    re-prefills counted, so a trajectory stays where its prefix cache is unless moving it pays.
 * 5. The moves left are made only when they lower the group's predicted makespan, re-prefills
 *    included (Heddle's objective with the generating trajectories where they are): a plan that
 *    gains nothing costs re-prefills for nothing, and the same placement round after round would
 *    churn.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { placementMakespan, planDpPlacement, type InterferenceFactor } from './dp-placement.js';

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

/**
 * The tool-call moves of one group. `rollouts` are the group's rollouts that may take part; a
 * trajectory owned by another is ignored. Throws ERR_INVALID_ARG (dp-placement.ts) on duplicate
 * trajectory ids, bad predictions or context lengths, or a bad `reprefillCost`.
 */
export function planToolCallMoves(
  trajectories: readonly PlacedTrajectory[],
  rollouts: readonly string[],
  interference: InterferenceFactor,
  options: ToolCallMoveOptions = {},
): ToolCallPlan {
  const reprefillCost = validReprefillCost(options.reprefillCost ?? 0);
  const workers = [...new Set(rollouts)].sort(byCodeUnit);
  const placed = trajectories.filter((t) => workers.includes(t.rollout));
  const costOf = new Map(placed.map((t) => [t.id, reprefillCost * contextTokensOf(t)]));
  const objective: Objective = { placed, lengthOf: new Map(placed.map((t) => [t.id, t.predictedTokens ?? 0])), costOf, workers, interference };
  const before = makespanOf(objective, new Map());
  const none: ToolCallPlan = { moves: [], makespanBefore: before, makespanAfter: before };
  if (workers.length < 2 || !placed.some((t) => t.atTool)) return none;

  const dp = planDpPlacement(
    placed.map((t) => ({ id: t.id, predictedTokens: objective.lengthOf.get(t.id)! })),
    workers,
    interference,
  );
  const rolloutOfRun = matchRunsToRollouts(
    dp.assignments.map((a) => a.trajectories),
    new Map(placed.map((t) => [t.id, t])),
    workers,
  );
  const target = new Map<string, string>();
  dp.assignments.forEach((a, run) => {
    for (const id of a.trajectories) target.set(id, rolloutOfRun[run]!);
  });
  const moving = new Map<string, string>();
  for (const t of placed) if (t.atTool && target.get(t.id) !== t.rollout) moving.set(t.id, target.get(t.id)!);
  const after = pruneMoves(objective, moving);
  if (moving.size === 0 || !(after < before)) return none;

  const moves = new Map<string, ToolCallMove>();
  for (const t of [...placed].sort((a, b) => byCodeUnit(a.id, b.id))) {
    const destination = moving.get(t.id);
    if (destination === undefined) continue;
    const key = `${t.rollout}\u0000${destination}`;
    let move = moves.get(key);
    if (move === undefined) {
      move = { source: t.rollout, destination, trajectories: [] };
      moves.set(key, move);
    }
    move.trajectories.push(t.id);
  }
  const ordered = [...moves.values()].sort((a, b) => byCodeUnit(a.source, b.source) || byCodeUnit(a.destination, b.destination));
  return { moves: ordered, makespanBefore: before, makespanAfter: after };
}

/** What the objective reads: the trajectories, their predicted tokens and move costs, the rollouts, f. */
interface Objective {
  placed: readonly PlacedTrajectory[];
  lengthOf: ReadonlyMap<string, number>;
  /** Token times a move of the trajectory costs its destination (its re-prefill). */
  costOf: ReadonlyMap<string, number>;
  workers: readonly string[];
  interference: InterferenceFactor;
}

/**
 * Drops from `moving` (in place), the costliest re-prefill first (ties by id), each move whose
 * dropping does not raise the makespan: what is left moves only where it pays. Returns the
 * makespan of what is left.
 */
function pruneMoves(objective: Objective, moving: Map<string, string>): number {
  let current = makespanOf(objective, moving);
  const costliestFirst = [...moving.keys()].sort((a, b) => objective.costOf.get(b)! - objective.costOf.get(a)! || byCodeUnit(a, b));
  // Until a pass drops nothing: a move kept early may stop paying once a later one is dropped.
  for (let dropped = true; dropped;) {
    dropped = false;
    for (const id of costliestFirst) {
      const destination = moving.get(id);
      if (destination === undefined) continue;
      moving.delete(id);
      const without = makespanOf(objective, moving);
      if (without <= current) {
        current = without;
        dropped = true;
      } else moving.set(id, destination);
    }
  }
  return current;
}

/**
 * Heddle's objective for the placement where `moving` trajectories are on their destination and
 * the rest where they are, each destination also spending the re-prefills of what moved onto it:
 * max over rollouts of f(|G|) · max L + Σ re-prefill costs.
 */
function makespanOf(objective: Objective, moving: ReadonlyMap<string, string>): number {
  const { placed, lengthOf, costOf, workers, interference } = objective;
  const groups = new Map<string, number[]>(workers.map((w) => [w, []]));
  const reprefill = new Map<string, number>(workers.map((w) => [w, 0]));
  for (const t of placed) {
    const destination = moving.get(t.id);
    groups.get(destination ?? t.rollout)!.push(lengthOf.get(t.id)!);
    if (destination !== undefined) reprefill.set(destination, reprefill.get(destination)! + costOf.get(t.id)!);
  }
  let worst = 0;
  for (const w of workers) {
    const lengths = groups.get(w)!;
    const decode = lengths.length === 0 ? 0 : placementMakespan([lengths], interference);
    worst = Math.max(worst, decode + reprefill.get(w)!);
  }
  return worst;
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

/**
 * Gives each DP run a rollout, the pairs sharing the most generating trajectories first (they
 * cannot move: a run given another rollout leaves them where they are, off the plan), then the
 * most trajectories (ties: earlier run, then rollout id).
 */
function matchRunsToRollouts(runs: readonly (readonly string[])[], byId: ReadonlyMap<string, PlacedTrajectory>, workers: readonly string[]): string[] {
  const pairs: { run: number; rollout: string; pinned: number; shared: number }[] = [];
  runs.forEach((ids, run) => {
    const shared = new Map<string, { pinned: number; shared: number }>();
    for (const id of ids) {
      const t = byId.get(id)!;
      const counts = shared.get(t.rollout) ?? { pinned: 0, shared: 0 };
      counts.shared++;
      if (!t.atTool) counts.pinned++;
      shared.set(t.rollout, counts);
    }
    for (const [rollout, counts] of shared) pairs.push({ run, rollout, ...counts });
  });
  pairs.sort((a, b) => b.pinned - a.pinned || b.shared - a.shared || a.run - b.run || byCodeUnit(a.rollout, b.rollout));
  const rolloutOfRun: (string | undefined)[] = runs.map(() => undefined);
  const taken = new Set<string>();
  for (const { run, rollout } of pairs) {
    if (rolloutOfRun[run] !== undefined || taken.has(rollout)) continue;
    rolloutOfRun[run] = rollout;
    taken.add(rollout);
  }
  // Runs that share nothing with a free rollout (empty runs among them) take the rest in order.
  const free = workers.filter((w) => !taken.has(w));
  return rolloutOfRun.map((r) => r ?? free.shift()!);
}
