/**
 * The baseline a remaining-length predictor must beat (issue #49): "the group's median so far".
 * A trajectory is predicted to end at the median total of its group's finished members (tokens
 * and turns alike), so its remaining length is that median less what it has done, never below 0
 * tokens and 1 turn. Before any member of its group has finished, the median of the job's recent
 * trajectories stands in (without it the baseline would have no answer at all for a group's first
 * turns), taken from whole finished groups as the predictor's history is (length-predictor.ts
 * says why: the most recent finishes alone are a step's long tail), so that the comparison is
 * about what each does with a trajectory's progress, not about a biased fallback.
 */
import { median } from '../../common/stats.js';
import type { RemainingLength, RemainingLengthPredictor, TrajectoryProgress } from './remaining-length.js';

interface Totals {
  tokens: number[];
  turns: number[];
}

export class GroupMedianBaseline implements RemainingLengthPredictor {
  private readonly groupOf = new Map<string, string>();
  private readonly groups = new Map<string, Totals & { running: number }>();
  private readonly recent: Totals = { tokens: [], turns: [] };
  /** The recent medians, recomputed every few finishes rather than sorted at every turn. */
  private recentMedian: Totals = { tokens: [], turns: [] };
  private finished = 0;
  private medianAt = 0;

  constructor(private readonly historySize = 8192) {}

  observe(progress: TrajectoryProgress): RemainingLength {
    const { id, group, tokens, turns } = progress;
    let g = this.groups.get(group);
    if (g === undefined) {
      g = { tokens: [], turns: [], running: 0 };
      this.groups.set(group, g);
    }
    if (!this.groupOf.has(id)) {
      this.groupOf.set(id, group);
      g.running++;
    }
    const basis = g.tokens.length > 0 ? g : this.recentMedian;
    if (basis.tokens.length === 0) return { tokens: 0, turns: 1 };
    return { tokens: Math.max(median(basis.tokens) - tokens, 0), turns: Math.max(Math.round(median(basis.turns)) - turns, 1) };
  }

  finish(id: string, total: { tokens: number; turns: number }): void {
    const group = this.groupOf.get(id);
    if (group === undefined) return;
    this.groupOf.delete(id);
    const g = this.groups.get(group)!;
    g.tokens.push(total.tokens);
    g.turns.push(total.turns);
    this.leave(group, g);
  }

  forget(id: string): void {
    const group = this.groupOf.get(id);
    if (group === undefined) return;
    this.groupOf.delete(id);
    this.leave(group, this.groups.get(group)!);
  }

  /** One member fewer running: the last one out turns the group into history. */
  private leave(group: string, g: Totals & { running: number }): void {
    if (--g.running > 0) return;
    this.groups.delete(group);
    if (g.tokens.length === 0) return;
    this.recent.tokens.push(...g.tokens);
    this.recent.turns.push(...g.turns);
    const excess = this.recent.tokens.length - this.historySize;
    if (excess > 0) {
      this.recent.tokens.splice(0, excess);
      this.recent.turns.splice(0, excess);
    }
    this.finished += g.tokens.length;
    if (this.finished - this.medianAt >= 32 || this.recentMedian.tokens.length === 0) {
      this.medianAt = this.finished;
      this.recentMedian = { tokens: [median(this.recent.tokens)], turns: [median(this.recent.turns)] };
    }
  }
}
