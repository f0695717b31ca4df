/**
 * Progressive remaining-length prediction for agentic trajectories (issue #49, Heddle §4.1),
 * refined at every turn boundary from the trajectory's own progress, its GRPO group and the job's
 * recent history.
 *
 * Heddle decomposes finished trajectories into (context, remaining length) tuples and fine-tunes a
 * small language model (Qwen-0.6B) on them. Simplified here, with no model to serve: the context
 * is reduced to two numbers, the turns generated so far and the tokens generated so far relative
 * to the job's current length scale, and the regression is a binned conditional median over the
 * tuples harvested from the most recent finished trajectories (the median, because it minimises
 * the absolute error). What this keeps from Heddle: the predictor is trained on the job's own
 * history, it conditions on what the trajectory has already done (a trajectory that has survived
 * long is likely to go on long: the length tail), and it sharpens turn by turn. What it loses: the
 * semantics of the prompt and of the generated text (a failed test that will need more turns),
 * which only a model reading the text can see.
 *
 * The group (same prompt) enters as a length scale: once half of the group's seen members have
 * finished, the group's median (its running members presumed to end longer than the finished
 * ones) against the job's says whether this prompt runs long. How much to
 * trust it is estimated from history, empirical-Bayes style: the spread of finished groups'
 * medians beyond what sampling alone explains is the signal (prompts that differ in difficulty);
 * with none (every prompt alike, as in the simulator's workload) the group is ignored rather than
 * adding noise.
 *
 * Lengths drift over training (responses grow), so tuples are stored relative to the scale in
 * force when they were observed and scaled back by today's.
 */
import { median } from '../../common/stats.js';
import type { RemainingLength, RemainingLengthPredictor, TrajectoryProgress } from './remaining-length.js';

export interface LengthPredictorOptions {
  /**
   * Finished trajectories the job's length scale is the median of. Like cellSize, it should hold
   * at least one training step's batch: the last trajectories to finish are a step's long tail,
   * so a shorter window of recent finishes is biased toward long ones (and, early in a step,
   * toward short ones).
   */
  historySize: number;
  /** Tuples kept per (turns, progress) cell, most recent first out (see historySize). */
  cellSize: number;
  /** A cell with fewer tuples borrows from neighbouring progress bins. */
  minSamples: number;
  /** Turn counts at or above this share one cell row (few trajectories reach them). */
  turnRows: number;
  /** Progress bins per unit of log1p(tokens / scale). */
  binsPerUnit: number;
  /** Completed groups the group weight is estimated from. */
  groupHistory: number;
}

export const DEFAULT_LENGTH_PREDICTOR_OPTIONS: Readonly<LengthPredictorOptions> = Object.freeze({
  // 512 prompts x 16 samples: the Laminar paper's batch.
  historySize: 8192,
  cellSize: 8192,
  minSamples: 32,
  turnRows: 12,
  binsPerUnit: 16,
  groupHistory: 256,
});

/** How often (finished trajectories) the scale and the group weight are recomputed: they move slowly. */
const REFRESH_EVERY = 32;
/** The variance of a sample median is about π/2 times the mean's. */
const MEDIAN_VARIANCE_FACTOR = Math.PI / 2;

interface Checkpoint {
  tokens: number;
  turns: number;
  scale: number;
}

interface Tuple {
  /** Remaining tokens over the scale in force when the checkpoint was taken. */
  relTokens: number;
  turns: number;
}

interface FinishedTrajectory {
  tokens: number;
  turns: number;
  checkpoints: Checkpoint[];
}

interface GroupState {
  running: Set<string>;
  finished: FinishedTrajectory[];
}

export class LengthPredictor implements RemainingLengthPredictor {
  private readonly options: LengthPredictorOptions;
  private readonly trajectories = new Map<string, { group: string; checkpoints: Checkpoint[] }>();
  private readonly groups = new Map<string, GroupState>();
  private readonly cells = new Map<string, Tuple[]>();
  /** Recent finished trajectories' total tokens and turns (rings of historySize). */
  private readonly totals: number[] = [];
  private readonly totalTurns: number[] = [];
  private totalsAt = 0;
  private finishedCount = 0;
  private jobScale = 0;
  private jobTurns = 0;
  /** log(group median / job scale) of completed groups, with their sizes and the variance of their log lengths. */
  private readonly groupDeviations: { dev: number; n: number; within: number }[] = [];
  /** Pooled within-group variance of log lengths, and the between-group signal variance. */
  private withinVar = 0;
  private signalVar = 0;
  /** Answers per (turns, bin), reused until REFRESH_EVERY more trajectories have finished. */
  private readonly answers = new Map<string, { at: number; answer: { relTokens: number; turns: number } | null }>();

  constructor(options: Partial<LengthPredictorOptions> = {}) {
    this.options = { ...DEFAULT_LENGTH_PREDICTOR_OPTIONS, ...options };
  }

  observe(progress: TrajectoryProgress): RemainingLength {
    const { id, group, tokens, turns } = progress;
    let t = this.trajectories.get(id);
    if (t === undefined) {
      t = { group, checkpoints: [] };
      this.trajectories.set(id, t);
    }
    const g = this.groupOf(group);
    g.running.add(id);
    const scale = this.scaleFor(g);
    t.checkpoints.push({ tokens, turns, scale });
    if (scale === 0) return { tokens: 0, turns: 1 };
    const answer = this.conditionalMedian(turns, tokens / scale);
    // No trajectory of the history was ever where this one is (its turns row is empty). Early in
    // a job that is a short history, and the job's medians stand in, as the baseline's. But past
    // the median it is a trajectory that has outlived what this predictor has seen, the long
    // tail progressive priority exists for: "the median less what it did" would predict 0 and
    // send it last (issue #49: a trajectory moved to a rollout whose history never reached its
    // turns went to the engine at priority 0, turn after turn). A heavy tail's expected
    // remainder grows with what has survived (a Pareto tail of index 2: as much again), so it
    // is predicted at least what it has generated so far.
    if (answer === null) return { tokens: Math.max(scale - tokens, tokens), turns: Math.max(1, Math.round(this.jobTurns) - turns, turns) };
    return { tokens: scale * answer.relTokens, turns: Math.max(1, Math.round(answer.turns)) };
  }

  /** The median remainder of the history's trajectories that were where this one is; null with no history. */
  private conditionalMedian(turns: number, relTokens: number): { relTokens: number; turns: number } | null {
    const key = this.cellKey(turns, this.binOf(relTokens));
    const cached = this.answers.get(key);
    if (cached !== undefined && this.finishedCount - cached.at < REFRESH_EVERY) return cached.answer;
    const tuples = this.neighbours(turns, relTokens);
    const answer = tuples.length === 0 ? null : { relTokens: median(tuples.map((x) => x.relTokens)), turns: median(tuples.map((x) => x.turns)) };
    this.answers.set(key, { at: this.finishedCount, answer });
    return answer;
  }

  finish(id: string, total: { tokens: number; turns: number }): void {
    const t = this.trajectories.get(id);
    if (t === undefined) return;
    this.trajectories.delete(id);
    const g = this.groups.get(t.group)!;
    g.running.delete(id);
    g.finished.push({ tokens: total.tokens, turns: total.turns, checkpoints: t.checkpoints });
    this.settle(t.group, g);
  }

  forget(id: string): void {
    const t = this.trajectories.get(id);
    if (t === undefined) return;
    this.trajectories.delete(id);
    const g = this.groups.get(t.group)!;
    g.running.delete(id);
    this.settle(t.group, g);
  }

  /** A group with nobody running any more becomes history (if any of it finished here). */
  private settle(group: string, g: GroupState): void {
    if (g.running.size > 0) return;
    // History is taken a whole group at a time: the members of a group that finish first are its
    // short ones, so learning from them at once would bias every estimate toward short lengths
    // until the rest had finished (censoring).
    this.groups.delete(group);
    if (g.finished.length === 0) return;
    for (const f of g.finished) this.learn(f);
    this.recordGroup(g.finished.map((f) => f.tokens));
  }

  private learn(f: FinishedTrajectory): void {
    this.recordTotal(f.tokens, f.turns);
    if (++this.finishedCount % REFRESH_EVERY === 0 || this.jobScale === 0) this.refresh();
    for (const c of f.checkpoints) {
      // A checkpoint taken before the job had a scale (its first groups) is placed by today's.
      const scale = c.scale === 0 ? this.jobScale : c.scale;
      const cell = this.cellOf(c.turns, c.tokens / scale);
      if (cell.length >= this.options.cellSize) cell.shift();
      cell.push({ relTokens: (f.tokens - c.tokens) / scale, turns: f.turns - c.turns });
    }
  }

  /** The weight given to a group's own median, for a group of n finished members (0: ignored). */
  groupWeight(n: number): number {
    if (this.signalVar <= 0 || n <= 0) return 0;
    return this.signalVar / (this.signalVar + (MEDIAN_VARIANCE_FACTOR * this.withinVar) / n);
  }

  private groupOf(group: string): GroupState {
    let g = this.groups.get(group);
    if (g === undefined) {
      g = { running: new Set(), finished: [] };
      this.groups.set(group, g);
    }
    return g;
  }

  /** The job's scale, moved toward the group's median once half the group has finished. */
  private scaleFor(g: GroupState): number {
    const n = g.finished.length;
    const size = n + g.running.size;
    if (this.jobScale === 0 || n === 0 || 2 * n < size) return this.jobScale;
    // The group's median with its running members taken to end longer than every finished one
    // (they have run longer): the lower median of the whole group, known once half has finished.
    const finished = g.finished.map((f) => f.tokens).sort((a, b) => a - b);
    const groupMedian = finished[Math.ceil(size / 2) - 1]!;
    if (!(groupMedian > 0)) return this.jobScale;
    return this.jobScale * Math.exp(this.groupWeight(n) * Math.log(groupMedian / this.jobScale));
  }

  private binOf(relTokens: number): number {
    return Math.floor(Math.log1p(Math.max(relTokens, 0)) * this.options.binsPerUnit);
  }

  private cellKey(turns: number, bin: number): string {
    return `${Math.min(turns, this.options.turnRows)}:${bin}`;
  }

  private cellOf(turns: number, relTokens: number): Tuple[] {
    const key = this.cellKey(turns, this.binOf(relTokens));
    let cell = this.cells.get(key);
    if (cell === undefined) {
      cell = [];
      this.cells.set(key, cell);
    }
    return cell;
  }

  /** The trajectory's own cell, widened to neighbouring progress bins until it holds minSamples. */
  private neighbours(turns: number, relTokens: number): Tuple[] {
    const bin = this.binOf(relTokens);
    const out: Tuple[] = [...(this.cells.get(this.cellKey(turns, bin)) ?? [])];
    for (let r = 1; out.length < this.options.minSamples && r <= this.options.binsPerUnit; r++) {
      for (const b of [bin - r, bin + r]) if (b >= 0) out.push(...(this.cells.get(this.cellKey(turns, b)) ?? []));
    }
    return out;
  }

  private recordTotal(tokens: number, turns: number): void {
    const { historySize } = this.options;
    if (this.totals.length < historySize) {
      this.totals.push(tokens);
      this.totalTurns.push(turns);
    } else {
      this.totals[this.totalsAt] = tokens;
      this.totalTurns[this.totalsAt] = turns;
      this.totalsAt = (this.totalsAt + 1) % historySize;
    }
  }

  private recordGroup(finished: number[]): void {
    const m = median(finished);
    if (!(m > 0) || this.jobScale === 0 || finished.length < 2) return;
    if (this.groupDeviations.length >= this.options.groupHistory) this.groupDeviations.shift();
    const logs = finished.filter((x) => x > 0).map(Math.log);
    const mean = logs.reduce((a, b) => a + b, 0) / logs.length;
    const within = logs.reduce((a, b) => a + (b - mean) ** 2, 0) / (logs.length - 1);
    this.groupDeviations.push({ dev: Math.log(m / this.jobScale), n: finished.length, within });
  }

  private refresh(): void {
    this.jobScale = median(this.totals);
    this.jobTurns = median(this.totalTurns);
    const d = this.groupDeviations;
    if (d.length < 8) return;
    // Pooled over the same groups as the spread it is compared with: one group's variance is too noisy.
    this.withinVar = d.reduce((a, x) => a + x.within, 0) / d.length;
    const mean = d.reduce((a, x) => a + x.dev, 0) / d.length;
    const observed = d.reduce((a, x) => a + (x.dev - mean) ** 2, 0) / (d.length - 1);
    const sampling = d.reduce((a, x) => a + (MEDIAN_VARIANCE_FACTOR * this.withinVar) / x.n, 0) / d.length;
    this.signalVar = Math.max(0, observed - sampling);
  }
}
