/**
 * Progressive priority (issue #49, after Heddle §4.2): every turn of a trajectory goes to the
 * engine with a priority, its predicted remaining output tokens, refined at each turn boundary,
 * so that the engine (and the agent's own line for a place there, engine-slots.ts) serves the
 * predicted long tail first. A trajectory that has run long so far is predicted to go on long
 * and rises as it unfolds; that is the "progressive" part.
 *
 * The prediction is the remaining-length predictor of src/manager/agentic (its trajectory's
 * progress, its GRPO group so far, the recent history of what this rollout finished). Beside it
 * the group-median baseline answers the same questions, unused for ordering: when a trajectory
 * ends, every prediction made for it is scored against what really remained, for both, and the
 * absolute errors go to `laminar_agent_remaining_tokens_error{predictor}` (the predictor is only
 * worth its keep while its error stays below the baseline's).
 *
 * Engines order by the priority in their own ways (SGLang: larger first with
 * `--enable-priority-scheduling`; vLLM: smaller first with `--scheduling-policy priority`): the
 * engine clients turn it into their API's sense; here larger always means sooner.
 */
import type { Histogram } from 'prom-client';
import { GroupMedianBaseline } from '../manager/agentic/group-median-baseline.js';
import { LengthPredictor } from '../manager/agentic/length-predictor.js';
import type { RemainingLength, RemainingLengthPredictor } from '../manager/agentic/remaining-length.js';
import type { GenerationTask } from '../rollout/task.js';

/** What a turn boundary said of one trajectory: its prediction, and the predictions to score at its end. */
interface Tracked {
  turns: number;
  prediction: RemainingLength;
  /** Output tokens at each boundary, with what the predictor and the baseline said remained. */
  scored: { tokensAt: number; predicted: number; baseline: number }[];
}

export interface ProgressivePriorityOptions {
  /** Observes absolute errors of the remaining tokens, labelled by predictor. */
  error: Histogram<'predictor'>;
  predictor?: RemainingLengthPredictor;
  baseline?: RemainingLengthPredictor;
}

/** Generated turns so far (closed ones): the predictor's `turns`. */
function turnsOf(task: GenerationTask): number {
  let n = 0;
  for (const s of task.segments) if (s.kind === 'generated') n++;
  return n;
}

export class ProgressivePriority {
  private readonly predictor: RemainingLengthPredictor;
  private readonly baseline: RemainingLengthPredictor;
  private readonly tracked = new Map<string, Tracked>();

  constructor(private readonly options: ProgressivePriorityOptions) {
    this.predictor = options.predictor ?? new LengthPredictor();
    this.baseline = options.baseline ?? new GroupMedianBaseline();
  }

  /**
   * The priority of the trajectory's next turn: its predicted remaining output tokens, rounded
   * (0 while nothing is known). Predicted once per turn boundary; a request sent again within a
   * turn (the engine aborted it, a 5xx) keeps the turn's priority.
   */
  priorityOf(task: GenerationTask): number {
    return Math.round(this.predict(task).tokens);
  }

  /** The trajectory's current prediction (refined if it has passed a turn boundary since). */
  predict(task: GenerationTask): RemainingLength {
    const turns = turnsOf(task);
    const known = this.tracked.get(task.trajectoryId);
    if (known !== undefined && known.turns === turns) return known.prediction;
    const progress = { id: task.trajectoryId, group: task.groupId, tokens: task.modelTokens, turns };
    const prediction = this.predictor.observe(progress);
    const baseline = this.baseline.observe(progress);
    const tracked = known ?? { turns, prediction, scored: [] };
    tracked.turns = turns;
    tracked.prediction = prediction;
    tracked.scored.push({ tokensAt: progress.tokens, predicted: prediction.tokens, baseline: baseline.tokens });
    this.tracked.set(task.trajectoryId, tracked);
    return prediction;
  }

  /** The last prediction of a trajectory this rollout runs (undefined: none made). */
  current(trajectoryId: string): RemainingLength | undefined {
    return this.tracked.get(trajectoryId)?.prediction;
  }

  /** The trajectory ended here: its predictions are scored and its totals become history. */
  finished(task: GenerationTask): void {
    const tracked = this.tracked.get(task.trajectoryId);
    if (tracked === undefined) return;
    this.tracked.delete(task.trajectoryId);
    const total = { tokens: task.modelTokens, turns: Math.max(1, turnsOf(task)) };
    this.predictor.finish(task.trajectoryId, total);
    this.baseline.finish(task.trajectoryId, total);
    for (const s of tracked.scored) {
      const remained = total.tokens - s.tokensAt;
      this.options.error.observe({ predictor: 'length_predictor' }, Math.abs(s.predicted - remained));
      this.options.error.observe({ predictor: 'group_median' }, Math.abs(s.baseline - remained));
    }
  }

  /** The trajectory left this rollout unfinished (moved, stopped, given back): forgotten, not scored. */
  left(trajectoryId: string): void {
    if (!this.tracked.delete(trajectoryId)) return;
    this.predictor.forget(trajectoryId);
    this.baseline.forget(trajectoryId);
  }
}
