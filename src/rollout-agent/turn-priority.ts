/**
 * Progressive priority (issue #49, after Heddle §4.2): every turn of a trajectory goes to the
 * engine with a priority, its predicted remaining *time* on the critical path, refined at each
 * turn boundary, so that the engine (and the agent's own line for a place there, engine-slots.ts)
 * serves the predicted long tail first. A trajectory that has run long so far is predicted to go
 * on long and rises as it unfolds; that is the "progressive" part.
 *
 * Remaining time, not remaining tokens: Heddle's longest-first approximates LPT, whose "length"
 * is processing time. On a tool-calling task a turn's tool call (a second) can dwarf its decode
 * (tens of milliseconds), so a long trajectory near its end has few tokens left but seconds of
 * tool calls ahead; ranked by tokens it fell in with fresh short ones and finished last (the
 * agentic bench's cause 1, docs/performance/agentic.md). The priority is therefore
 *   predicted remaining tokens × the engine's per-token decode time
 *   + predicted remaining tool calls (remaining turns − 1: the last turn answers) × the mean
 *     latency of this agent's recent calls of the trajectory's tool (all tools' mean before that
 *     tool has been seen),
 * in whole milliseconds. Both rates are learned online from what the agent sees: the decode time
 * from its streams (decoded(), between a request's first and last chunk, so that neither the
 * engine's queue nor the prefill counts), the tool latency from the observation each turn
 * boundary appends (its action's `latencyMs`). Until both have been measured the priority is the
 * predicted remaining tokens, as before (the same ordering as any time with instant tools).
 *
 * The prediction is the remaining-length predictor of src/manager/agentic (its trajectory's
 * progress, its GRPO group so far, the recent history of what this rollout finished), raised to
 * the prompt's own history where that says more: a prompt is trained on epoch after epoch, and
 * the prompt pool records the output tokens of its group's longest trajectory each time
 * (`recordLength`, what longest-first claims order by; it comes with the claim). A trajectory of
 * a prompt that ran L tokens last time, g tokens in, is predicted at least L - g tokens more, in
 * (L - g) / (this agent's mean tokens a turn) turns. Without it, a trajectory of the longest group
 * looks like every fresh one for its first turns (the predictor knows nothing of it until it has
 * outlived the short ones): claimed first, it then queued behind short fresh turns of equal
 * priority, and preemption made that worse (docs/performance/agentic.md). Beside it
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
import type { ObservationAction } from '../data/index.js';
import { GroupMedianBaseline } from '../manager/agentic/group-median-baseline.js';
import { LengthPredictor } from '../manager/agentic/length-predictor.js';
import type { RemainingLength, RemainingLengthPredictor } from '../manager/agentic/remaining-length.js';
import type { GenerationTask } from '../rollout/task.js';

/** Weight of the newest measurement in the running means: about the last 20 count. */
const RATE_ALPHA = 0.05;
/** Tools whose latency is tracked apart; beyond, only the all-tools mean (tool names come from the model). */
const MAX_TOOL_KINDS = 64;

/**
 * The agent's running measurements: the engine's per-token decode time and its tools' latencies,
 * exponentially weighted (the engine's batch and the tools' load drift over a job).
 */
export class TurnCosts {
  private msPerToken: number | null = null;
  private toolMs: number | null = null;
  private turnTokens: number | null = null;
  private readonly byTool = new Map<string, number>();

  /** A request streamed `tokens` tokens over `ms` milliseconds after its first chunk. */
  decoded(tokens: number, ms: number): void {
    if (!(tokens > 0) || !(ms >= 0) || !Number.isFinite(ms)) return;
    const rate = ms / tokens;
    // Weighted by tokens: a long stream says more of the rate than a two-token one.
    const w = Math.min(1, RATE_ALPHA * Math.max(1, tokens / 16));
    this.msPerToken = this.msPerToken === null ? rate : this.msPerToken + w * (rate - this.msPerToken);
  }

  /** A turn ended after generating `tokens` tokens. */
  turn(tokens: number): void {
    if (!(tokens > 0) || !Number.isFinite(tokens)) return;
    this.turnTokens = this.turnTokens === null ? tokens : this.turnTokens + RATE_ALPHA * (tokens - this.turnTokens);
  }

  /** Mean output tokens of a turn (null until a turn has ended). */
  get tokensPerTurn(): number | null {
    return this.turnTokens;
  }

  /** A tool call returned after `ms` milliseconds. */
  tool(name: string, ms: number): void {
    if (!(ms >= 0) || !Number.isFinite(ms)) return;
    this.toolMs = this.toolMs === null ? ms : this.toolMs + RATE_ALPHA * (ms - this.toolMs);
    const known = this.byTool.get(name);
    if (known !== undefined) this.byTool.set(name, known + RATE_ALPHA * (ms - known));
    else if (this.byTool.size < MAX_TOOL_KINDS) this.byTool.set(name, ms);
  }

  /** Milliseconds a remaining prediction costs; null until both rates have been measured. */
  remainingMs(prediction: RemainingLength, tool: string | undefined): number | null {
    if (this.msPerToken === null || this.toolMs === null) return null;
    const perCall = (tool !== undefined ? this.byTool.get(tool) : undefined) ?? this.toolMs;
    return prediction.tokens * this.msPerToken + Math.max(0, prediction.turns - 1) * perCall;
  }
}

/** What a turn boundary said of one trajectory: its prediction, and the predictions to score at its end. */
interface Tracked {
  turns: number;
  /** Output tokens at the last boundary (the next boundary's turn length is the difference). */
  tokensAt: number;
  prediction: RemainingLength;
  /** The priority of the turn predicted (the remaining time in ms, or tokens before any rate is known). */
  priority: number;
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

/** The action of the trajectory's last segment when that is an observation (it waits to generate after a tool call). */
function lastAction(task: GenerationTask): ObservationAction | undefined {
  const last = task.segments[task.segments.length - 1];
  return last?.kind === 'observation' ? last.action : undefined;
}

/**
 * A prediction's turns cut to what the episode's limit leaves. The prompt's history predicts its
 * turns as its remaining tokens over the agent's mean tokens a turn, which is far off where turns
 * vary in length (1-60 tokens in the agentic bench, a mean of 21): there a long prompt's 317
 * remaining tokens at one agent's running mean of ~4 tokens a turn made 80 turns (80 s of tool
 * calls) where 11 were left, and some trajectories ranked at 430 s on a workload whose longest
 * path is 12 s.
 */
function withinTurnLimit(prediction: RemainingLength, turns: number, turnLimit: number | undefined): RemainingLength {
  if (turnLimit === undefined) return prediction;
  const left = Math.max(1, turnLimit - turns);
  return prediction.turns > left ? { ...prediction, turns: left } : prediction;
}

export class ProgressivePriority {
  private readonly predictor: RemainingLengthPredictor;
  private readonly baseline: RemainingLengthPredictor;
  private readonly tracked = new Map<string, Tracked>();
  /** The decode and tool rates the priority converts a prediction into time with. */
  readonly costs = new TurnCosts();

  constructor(private readonly options: ProgressivePriorityOptions) {
    this.predictor = options.predictor ?? new LengthPredictor();
    this.baseline = options.baseline ?? new GroupMedianBaseline();
  }

  /**
   * The priority of the trajectory's next turn: its predicted remaining time in milliseconds,
   * rounded (the predicted remaining tokens until the decode and tool rates are measured; 0 while
   * nothing is known). Predicted once per turn boundary; a request sent again within a turn (the
   * engine aborted it, a 5xx) keeps the turn's priority.
   */
  priorityOf(task: GenerationTask, turnLimit?: number): number {
    this.predict(task, turnLimit);
    return this.tracked.get(task.trajectoryId)!.priority;
  }

  /** A request of this agent streamed `tokens` tokens over `ms` milliseconds after its first chunk. */
  decoded(tokens: number, ms: number): void {
    this.costs.decoded(tokens, ms);
  }

  /**
   * The trajectory's current prediction (refined if it has passed a turn boundary since). With
   * `turnLimit` (the episode's turn limit) the predicted turns never exceed the turns it has left.
   */
  predict(task: GenerationTask, turnLimit?: number): RemainingLength {
    const turns = turnsOf(task);
    const known = this.tracked.get(task.trajectoryId);
    if (known !== undefined && known.turns === turns) return known.prediction;
    // A new boundary: the tool call that just ended it (the last observation) is a latency measured.
    const last = lastAction(task);
    if (last !== undefined && last.status !== 'bad_call') this.costs.tool(last.tool, last.latencyMs);
    const progress = { id: task.trajectoryId, group: task.groupId, tokens: task.modelTokens, turns };
    if (known !== undefined) this.costs.turn(progress.tokens - known.tokensAt);
    const prediction = withinTurnLimit(this.withPromptHistory(this.predictor.observe(progress), task), turns, turnLimit);
    const baseline = this.baseline.observe(progress);
    const ms = this.costs.remainingMs(prediction, last?.tool);
    const priority = Math.round(ms ?? prediction.tokens);
    const tracked = known ?? { turns, tokensAt: progress.tokens, prediction, priority, scored: [] };
    tracked.turns = turns;
    tracked.tokensAt = progress.tokens;
    tracked.prediction = prediction;
    tracked.priority = priority;
    tracked.scored.push({ tokensAt: progress.tokens, predicted: prediction.tokens, baseline: baseline.tokens });
    this.tracked.set(task.trajectoryId, tracked);
    return prediction;
  }

  /**
   * The prediction, raised to what the prompt's history says remains when that is more: its
   * longest trajectory last time (`groupLastLength`) less what this one has generated.
   */
  private withPromptHistory(prediction: RemainingLength, task: GenerationTask): RemainingLength {
    const last = task.groupLastLength;
    if (last === undefined) return prediction;
    const tokens = last - task.modelTokens;
    if (!(tokens > prediction.tokens)) return prediction;
    const perTurn = this.costs.tokensPerTurn;
    return { tokens, turns: perTurn === null ? prediction.turns : Math.max(prediction.turns, Math.ceil(tokens / perTurn)) };
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
