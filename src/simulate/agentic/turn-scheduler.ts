/**
 * Issue #49's scheduling of the tool-call task's turns in laminar's simulated rollouts
 * (tool-schedule.ts says which mechanism does what), driving the project's own components: the
 * manager's remaining-length predictor or the group-median baseline (src/manager/agentic/), and
 * the `dp` planner's tool-call moves (src/manager/repack/tool-call-moves.ts, Heddle's presorted DP).
 *
 * Each rollout has its own predictor, as each rollout agent has (turn-priority.ts), learning from
 * what that rollout finished. A trajectory is observed where the agent observes it: when it is
 * claimed (0 tokens, 0 turns) and at each tool call (the tokens and turns so far), and finished
 * with its totals; one that leaves its rollout is forgotten there. Its priority is the prediction's remaining tokens, rounded, as the agent sends
 * it. The dp planner sees every trajectory of a version group with its latest prediction and
 * whether it waits at a tool; only those move, at once (they hold nothing at any engine: the
 * real move's 0.7 s of partial-pool traffic overlaps the call and is not modelled).
 */
import { GroupMedianBaseline } from '../../manager/agentic/group-median-baseline.js';
import { LengthPredictor } from '../../manager/agentic/length-predictor.js';
import type { RemainingLengthPredictor } from '../../manager/agentic/remaining-length.js';
import { planToolCallMoves, type PlacedTrajectory } from '../../manager/repack/tool-call-moves.js';
import type { EngineActor } from '../engine/engine-actor.js';
import type { LeapRequest } from '../engine/leap-engine.js';
import type { Rollout } from '../fleet/rollout.js';
import type { ToolCallLoop } from '../fleet/tool-calls.js';
import type { Workload } from '../workload/workload.js';
import type { ToolSchedule } from './tool-schedule.js';

/** What the scheduler needs of the laminar driver. */
export interface TurnSchedulerDriver {
  rollouts: readonly Rollout[];
  /** The weight version trajectory `id` is generated with. */
  versionOf(id: number): number;
  /** Trajectory `id` now belongs to `to` (its owned counts moved); the driver lets `from` go on. */
  transferred(from: Rollout, to: Rollout): void;
}

export interface TurnSchedulerStats {
  /** Remaining-token predictions made, and their summed absolute error against what remained. */
  predictions: number;
  absErrorTokens: number;
  /** Tool-call moves: plans with moves, and trajectories moved at their tools. */
  toolCallMovePlans: number;
  movedAtTools: number;
}

export class TurnScheduler {
  /** Per rollout, its predictor (none when the schedule needs no predictions). */
  private readonly predictors = new Map<Rollout, RemainingLengthPredictor>();
  private readonly needsPredictions: boolean;
  private readonly rolloutOf = new Map<EngineActor, Rollout>();
  readonly stats: TurnSchedulerStats = { predictions: 0, absErrorTokens: 0, toolCallMovePlans: 0, movedAtTools: 0 };
  /**
   * Per trajectory id, its predictions not yet scored, flat: output tokens at the boundary and
   * tokens predicted to remain (the last pair is its latest prediction).
   */
  private readonly pending = new Map<number, number[]>();

  constructor(
    readonly schedule: ToolSchedule,
    private readonly workload: Workload,
    private readonly tools: ToolCallLoop,
    private readonly driver: TurnSchedulerDriver,
  ) {
    this.needsPredictions = schedule.priority === 'longest-predicted' || schedule.placement === 'dp-at-tool';
    tools.hooks = {
      priorityAtCall: (actor, id, turns, tokens) => this.observe(this.rolloutOf.get(actor)!, id, turns, tokens),
    };
    if (schedule.placement === 'least-load') tools.hooks.placeReturn = (from, req) => this.leastLoad(from, req);
  }

  /** The rollouts' engines, to find a rollout from the engine a turn comes back under. */
  register(r: Rollout): void {
    this.rolloutOf.set(r.actor, r);
    if (this.needsPredictions) this.predictors.set(r, this.schedule.predictor === 'length' ? new LengthPredictor() : new GroupMedianBaseline());
  }

  /** Requests `r` just claimed: their first turn's priority. */
  claimed(r: Rollout, reqs: LeapRequest[]): void {
    if (!this.needsPredictions) return;
    for (const req of reqs) {
      const priority = this.observe(r, req.id, 0, req.generated);
      if (priority !== 0) req.priority = priority;
    }
  }

  /** Trajectory `id`'s response is complete on `r`: its predictor learns the totals; its predictions are scored. */
  completed(r: Rollout, id: number): void {
    if (!this.needsPredictions) return;
    const tokens = this.workload.outputTokens(id);
    const turns = this.workload.callsOf(id, tokens).length + 1;
    this.predictors.get(r)!.finish(`t${id}`, { tokens, turns });
    const made = this.pending.get(id);
    if (made === undefined) return;
    this.pending.delete(id);
    for (let i = 0; i < made.length; i += 2) {
      this.stats.predictions++;
      this.stats.absErrorTokens += Math.abs(tokens - made[i]! - made[i + 1]!);
    }
  }

  /** Mean absolute error of the predictions scored so far, tokens (null before any). */
  get maeTokens(): number | null {
    return this.stats.predictions === 0 ? null : this.stats.absErrorTokens / this.stats.predictions;
  }

  /** A turn boundary on `r`: the refined prediction, and the turn's priority (0 in a FCFS schedule). */
  private observe(r: Rollout, id: number, turns: number, tokens: number): number {
    const predictor = this.predictors.get(r);
    if (predictor === undefined) return 0;
    const p = predictor.observe({ id: `t${id}`, group: `g${this.workload.promptOf(id)}`, tokens, turns });
    let made = this.pending.get(id);
    if (made === undefined) this.pending.set(id, (made = []));
    made.push(tokens, p.tokens);
    return this.schedule.priority === 'longest-predicted' ? Math.round(p.tokens) : 0;
  }

  /** Least-load placement of a returning turn: the rollout of its version holding the fewest requests. */
  private leastLoad(from: EngineActor, req: LeapRequest): EngineActor {
    const source = this.rolloutOf.get(from)!;
    const version = this.driver.versionOf(req.id);
    let best = source;
    let bestLoad = eligible(source, version) ? source.actor.engine.heldCount : Number.POSITIVE_INFINITY;
    for (const r of this.driver.rollouts) {
      if (r === source || !eligible(r, version)) continue;
      const load = r.actor.engine.heldCount;
      if (load < bestLoad) {
        best = r;
        bestLoad = load;
      }
    }
    if (best !== source) this.transfer(req.id, source, best);
    return best.actor;
  }

  /**
   * The `dp` planner's round for one version group of rollouts: every trajectory they own (in
   * their engines or at their tools) with its latest prediction, planned by planToolCallMoves;
   * trajectories at tools move to their destination. Returns the moves made.
   */
  toolCallMoves(group: readonly Rollout[], rooflineBatch: number): number {
    if (group.length < 2) return 0;
    const placed: PlacedTrajectory[] = [];
    for (const r of group) {
      for (const id of r.actor.engine.heldIds()) placed.push({ id: String(id), rollout: r.id, predictedTokens: this.predictionOf(id), atTool: false });
      for (const id of this.tools.atTool(r.actor)) placed.push({ id: String(id), rollout: r.id, predictedTokens: this.predictionOf(id), atTool: true });
    }
    const plan = planToolCallMoves(
      placed,
      group.map((r) => r.id),
      rooflineBatch,
    );
    if (plan.moves.length === 0) return 0;
    this.stats.toolCallMovePlans++;
    const byId = new Map(group.map((r) => [r.id, r]));
    for (const move of plan.moves) {
      const source = byId.get(move.source)!;
      const destination = byId.get(move.destination)!;
      for (const id of move.trajectories) {
        if (!this.tools.relocate(Number(id), source.actor, destination.actor)) continue;
        this.stats.movedAtTools++;
        this.transfer(Number(id), source, destination);
      }
    }
    return plan.moves.length;
  }

  /** Trajectory `id` leaves `from` for `to`: forgotten by `from`'s predictor, owned by `to`. */
  private transfer(id: number, from: Rollout, to: Rollout): void {
    this.predictors.get(from)?.forget(`t${id}`);
    this.driver.transferred(from, to);
  }

  private predictionOf(id: number): number | null {
    const made = this.pending.get(id);
    return made === undefined ? null : made[made.length - 1]!;
  }
}

/** A rollout a turn of `version` may run on: alive, generating that version, not in a move. */
function eligible(r: Rollout, version: number): boolean {
  return !r.dead && !r.reinitialising && !r.inMove && r.phase === 'generating' && r.version === version;
}
