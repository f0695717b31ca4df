/**
 * Moves of agentic trajectories while they wait at tool calls (issue #49, Heddle §5: placement by
 * predicted length, migration during tool calls), the repack round's `dp` planner: a pure
 * function of what the rollouts of one weight-version group report of their trajectories.
 *
 * A trajectory waiting at a tool call holds nothing at any engine (its request has ended, its KV
 * is free), so its next turn may go to another rollout at no cost but the re-prefill of its
 * context there, a small fraction of a turn's decode. Such a move is free in the sense that
 * no generation stops for it; a trajectory that is generating is never moved here: it becomes
 * movable at its next tool call.
 *
 * 1. Heddle's presorted DP (dp-placement.ts) places all the group's trajectories (generating ones
 *    included: they weigh on where the others should go) on its rollouts by predicted remaining
 *    tokens (none predicted: 0), with roofline interference (f(s) = max(1, s / B)).
 * 2. The DP's runs are given to rollouts so that as many trajectories as possible stay where they
 *    are (its workers are interchangeable): the run and rollout that share the most trajectories
 *    first, ties by run (longest first) and rollout id. Staying is preferred: a trajectory that
 *    stays keeps the engine's prefix cache of its context.
 * 3. Trajectories at tools whose run is on another rollout move there; nothing else moves.
 * 4. The moves are made only when they lower the group's predicted makespan (Heddle's objective
 *    with the generating trajectories where they are): a plan that gains nothing costs
 *    re-prefills for nothing, and the same placement round after round would churn.
 */
import { placementMakespan, planDpPlacement, type InterferenceFactor } from './dp-placement.js';

export interface PlacedTrajectory {
  id: string;
  /** The rollout that owns it now. */
  rollout: string;
  /** Predicted remaining output tokens (null: no prediction, taken as 0). */
  predictedTokens: number | null;
  /** Waiting at a tool call (nothing at the engine): the only ones that move. */
  atTool: boolean;
}

export interface ToolCallMove {
  source: string;
  destination: string;
  /** Trajectories at tool calls to hand from source to destination. */
  trajectories: string[];
}

export interface ToolCallPlan {
  moves: ToolCallMove[];
  /** The group's predicted makespan (token times) as it is, and after the moves (equal when none). */
  makespanBefore: number;
  makespanAfter: number;
}

const byCodeUnit = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The tool-call moves of one group. `rollouts` are the group's rollouts that may take part; a
 * trajectory owned by another is ignored. Throws ERR_INVALID_ARG (dp-placement.ts) on duplicate
 * trajectory ids or bad predictions.
 */
export function planToolCallMoves(trajectories: readonly PlacedTrajectory[], rollouts: readonly string[], interference: InterferenceFactor): ToolCallPlan {
  const workers = [...new Set(rollouts)].sort(byCodeUnit);
  const placed = trajectories.filter((t) => workers.includes(t.rollout));
  const lengthOf = new Map(placed.map((t) => [t.id, t.predictedTokens ?? 0]));
  const before = makespanOf(placed, new Map(), lengthOf, workers, interference);
  const none: ToolCallPlan = { moves: [], makespanBefore: before, makespanAfter: before };
  if (workers.length < 2 || !placed.some((t) => t.atTool)) return none;

  const dp = planDpPlacement(
    placed.map((t) => ({ id: t.id, predictedTokens: lengthOf.get(t.id)! })),
    workers,
    interference,
  );
  const rolloutOfRun = matchRunsToRollouts(
    dp.assignments.map((a) => a.trajectories),
    new Map(placed.map((t) => [t.id, t.rollout])),
    workers,
  );
  const target = new Map<string, string>();
  dp.assignments.forEach((a, run) => {
    for (const id of a.trajectories) target.set(id, rolloutOfRun[run]!);
  });
  const moving = new Map<string, string>();
  for (const t of placed) if (t.atTool && target.get(t.id) !== t.rollout) moving.set(t.id, target.get(t.id)!);
  if (moving.size === 0) return none;
  const after = makespanOf(placed, moving, lengthOf, workers, interference);
  if (!(after < before)) return none;

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

/** Heddle's objective for the placement where `moving` trajectories are on their destination and the rest where they are. */
function makespanOf(
  placed: readonly PlacedTrajectory[],
  moving: ReadonlyMap<string, string>,
  lengthOf: ReadonlyMap<string, number>,
  workers: readonly string[],
  interference: InterferenceFactor,
): number {
  const groups = new Map<string, number[]>(workers.map((w) => [w, []]));
  for (const t of placed) groups.get(moving.get(t.id) ?? t.rollout)!.push(lengthOf.get(t.id)!);
  return placementMakespan([...groups.values()], interference);
}

/** Gives each DP run a rollout, the pairs sharing the most trajectories first (ties: earlier run, then rollout id). */
function matchRunsToRollouts(runs: readonly (readonly string[])[], rolloutOf: ReadonlyMap<string, string>, workers: readonly string[]): string[] {
  const pairs: { run: number; rollout: string; shared: number }[] = [];
  runs.forEach((ids, run) => {
    const shared = new Map<string, number>();
    for (const id of ids) shared.set(rolloutOf.get(id)!, (shared.get(rolloutOf.get(id)!) ?? 0) + 1);
    for (const [rollout, n] of shared) pairs.push({ run, rollout, shared: n });
  });
  pairs.sort((a, b) => b.shared - a.shared || a.run - b.run || byCodeUnit(a.rollout, b.rollout));
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
