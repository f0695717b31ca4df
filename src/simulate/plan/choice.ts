/**
 * `laminar plan`'s decisions from the simulated splits, pure:
 *
 * - the best split: the highest training throughput. Splits within TIE_FRACTION of it count as
 *   equal (10 steps of a long-tailed workload do not measure closer than that), and among those
 *   the least stale wins: inherent staleness max, then p90, then consumption max, p90 (staler
 *   trajectories are what an operator trades for throughput, §6), then the fewest rollout GPUs
 *   (a shorter relay chain).
 * - the repack interval: 5 s unless a trainer step is shorter than 50 s, then a tenth of the step
 *   (docs/design/simulator.md, "Commands"): a round every 5 s is enough while versions come
 *   minutes apart, and a short step needs several rounds per version to consolidate the tails.
 * - the trainer step those are measured on: the median interval between actor-update completions
 *   after the warm-up, as the run's throughput is measured.
 */
import { median } from '../../common/stats.js';

export const TIE_FRACTION = 0.02;
export const REPACK_INTERVAL_S = 5;
export const SHORT_STEP_S = 50;

interface Staleness {
  p50: number;
  p90: number;
  max: number;
}

export interface SplitOutcome {
  trainGpus: number;
  rolloutGpus: number;
  tokensPerS: number;
  inherent: Staleness;
  consumption: Staleness;
}

export interface Choice<T> {
  best: T;
  /** Why it was chosen, in a sentence for the output. */
  reason: string;
  /** The other splits within TIE_FRACTION of the highest throughput. */
  ties: T[];
}

const staler = (a: SplitOutcome, b: SplitOutcome): number =>
  a.inherent.max - b.inherent.max ||
  a.inherent.p90 - b.inherent.p90 ||
  a.consumption.max - b.consumption.max ||
  a.consumption.p90 - b.consumption.p90 ||
  a.rolloutGpus - b.rolloutGpus;

const tokens = (x: number): string => new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 }).format(x);
const staleText = (s: Staleness): string => `${s.p50}/${s.p90}/${s.max}`;

export function chooseSplit<T extends SplitOutcome>(outcomes: readonly T[]): Choice<T> {
  if (outcomes.length === 0) throw new RangeError('no split to choose from');
  const fastest = outcomes.reduce((a, b) => (b.tokensPerS > a.tokensPerS ? b : a));
  const near = outcomes.filter((o) => o.tokensPerS >= fastest.tokensPerS * (1 - TIE_FRACTION));
  const best = [...near].sort(staler)[0]!;
  const ties = near.filter((o) => o !== best);
  const tolerance = `${TIE_FRACTION * 100} %`;
  let reason: string;
  if (best === fastest) {
    const others = outcomes.filter((o) => o !== best);
    const next = others.length === 0 ? null : others.reduce((a, b) => (b.tokensPerS > a.tokensPerS ? b : a));
    reason =
      `the highest training throughput, ${tokens(best.tokensPerS)} tokens/s` +
      (next === null ? '' : ` (the next: ${tokens(next.tokensPerS)} at ${next.trainGpus} trainer GPUs)`) +
      (ties.length === 0 ? '' : `; also within ${tolerance} but no less stale: ${ties.map((o) => o.trainGpus).join(', ')} trainer GPUs`);
  } else {
    reason =
      `within ${tolerance} of the highest throughput (${tokens(fastest.tokensPerS)} tokens/s at ${fastest.trainGpus} trainer GPUs), ` +
      `and less stale: inherent p50/p90/max ${staleText(best.inherent)} against ${staleText(fastest.inherent)}, consumption ${staleText(best.consumption)} against ${staleText(fastest.consumption)}`;
  }
  return { best, reason, ties };
}

/** The manager's repack interval for a trainer step of `stepS` seconds, in whole milliseconds. */
export function repackIntervalFor(stepS: number): number {
  if (!(stepS > 0)) throw new RangeError(`a trainer step must be positive, got ${stepS}`);
  if (stepS >= SHORT_STEP_S) return REPACK_INTERVAL_S;
  return Math.max(1, Math.round(stepS * 100)) / 1e3;
}

/** The median time between actor-update completions after `warmupSteps` (at least the first interval). */
export function trainerStepS(stepEndsS: readonly number[], warmupSteps: number): number {
  const intervals: number[] = [];
  for (let i = Math.max(1, warmupSteps); i < stepEndsS.length; i++) intervals.push(stepEndsS[i]! - stepEndsS[i - 1]!);
  if (intervals.length === 0) throw new RangeError(`a trainer step needs two step ends, got ${stepEndsS.length}`);
  return median(intervals);
}
