/**
 * What a machine failure did to a run (paper §8.5, Figure 16), from the run's timeline alone:
 * generation throughput while the machine was down and after its replacement ran, over before
 * the failure; the trainer's step rate while it was down over before. Windows are
 * `run.reportWindowS` long; a window counts for a span when it lies wholly inside it.
 */
import type { ScenarioRunResult } from '../systems/run-context.js';

export interface FailureEffect {
  scenario: string;
  gpus: number;
  atS: number;
  /** When the replacement machine joined (null: never replaced). */
  backAtS: number | null;
  rolloutsBefore: number;
  rolloutsLost: number;
  /** Mean generation tokens/s before the failure (over as long a span as the outage, after the first window). */
  generationBefore: number;
  generationDuring: number;
  /** From one window after the replacement joined to the end of the run (null: not replaced or no window). */
  generationAfter: number | null;
  /**
   * Training steps per hour before the failure (after the warm-up), and over the steps ending from
   * the failure to one mean step after the replacement joined (a step can be longer than the outage).
   */
  stepsPerHourBefore: number;
  stepsPerHourDuring: number | null;
  orphaned: number;
  resumed: number;
  returned: number;
}

const mean = (xs: number[]): number => (xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length);

/** The effect of the first machine failure of `run`, or null when it had none (or no timeline). */
export function failureEffect(run: ScenarioRunResult): FailureEffect | null {
  const f = run.failures.find((x) => x.kind === 'machine');
  const timeline = run.timeline;
  if (!f || !timeline || timeline.length === 0) return null;
  const window = timeline[0]!.endS - timeline[0]!.startS;
  const end = f.backAtS ?? run.virtualS;
  const span = Math.max(window, end - f.atS);
  const before = timeline.filter((w) => w.endS <= f.atS + 1e-9 && w.startS >= Math.max(window, f.atS - span) - 1e-9);
  const during = timeline.filter((w) => w.startS >= f.atS - 1e-9 && w.endS <= end + 1e-9);
  const after = f.backAtS === null ? [] : timeline.filter((w) => w.startS >= f.backAtS! + window - 1e-9);
  const ends = run.stepEndsS;
  const rate = (from: number, to: number): number | null => {
    const inside = ends.filter((t) => t > from && t <= to);
    const previous = ends.filter((t) => t <= from).at(-1);
    if (inside.length === 0 || previous === undefined) return null;
    return (inside.length / (inside.at(-1)! - previous)) * 3600;
  };
  const warm = ends[Math.max(0, run.warmupSteps - 1)] ?? 0;
  const stepsBefore = ends.filter((t) => t > warm && t <= f.atS);
  const stepsPerHourBefore = stepsBefore.length > 0 ? (stepsBefore.length / (stepsBefore.at(-1)! - warm)) * 3600 : Number.NaN;
  return {
    scenario: run.scenario,
    gpus: run.gpus,
    atS: f.atS,
    backAtS: f.backAtS,
    rolloutsBefore: run.placement.rollouts,
    rolloutsLost: f.rolloutsLost,
    generationBefore: mean(before.map((w) => w.generationTokensPerS)),
    generationDuring: mean(during.map((w) => w.generationTokensPerS)),
    generationAfter: after.length > 0 ? mean(after.map((w) => w.generationTokensPerS)) : null,
    stepsPerHourBefore,
    stepsPerHourDuring: Number.isFinite(stepsPerHourBefore) ? rate(f.atS, end + 3600 / stepsPerHourBefore) : null,
    orphaned: f.orphaned,
    resumed: f.resumed,
    returned: f.returned,
  };
}
