/**
 * What a machine failure did to a run (paper §8.5, Figure 16), from the run's timelines alone:
 * generation throughput while the machine was down and after its replacement ran, against the
 * same windows of the same run without the failure (`timelineWithoutFailures`, runScenario's
 * twin), and against the span before the failure; the trainer's step rate while it was down over
 * before. Windows are `run.reportWindowS` long; a window counts for a span when it lies wholly
 * inside it.
 *
 * The twin is what §8.5's drop "due to the loss of rollouts" is measured against. The span before
 * the failure is another phase of the rollouts' cycle: their claims follow the trainer's versions
 * and a rollout's rate its claim's life, so with the failure struck as a step starts the span
 * before it and the outage compare the end of one cycle with the start of the next (on
 * failure-32b-128 the twin alone generates 0.88 as much in the outage's windows as before them).
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
  /**
   * From one window after the replacement joined to the end of the run, or of its twin if that
   * ends first (null: not replaced or no window).
   */
  generationAfter: number | null;
  /** The same windows in the run without the failure (null: no twin in the results). */
  generationDuringWithout: number | null;
  generationAfterWithout: number | null;
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
  const twin = run.timelineWithoutFailures ?? null;
  const last = twin === null || twin.length === 0 ? Number.POSITIVE_INFINITY : twin.at(-1)!.endS;
  const after = f.backAtS === null ? [] : timeline.filter((w) => w.startS >= f.backAtS! + window - 1e-9 && w.endS <= last + 1e-9);
  // The twin's windows are the run's (the same clock from 0): matched by their start.
  const twinOf = (ws: typeof timeline): number | null => {
    if (twin === null || ws.length === 0) return null;
    const byStart = new Map(twin.map((w) => [w.startS.toFixed(3), w]));
    const matched = ws.flatMap((w) => byStart.get(w.startS.toFixed(3)) ?? []);
    return matched.length === ws.length ? mean(matched.map((w) => w.generationTokensPerS)) : null;
  };
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
    generationDuringWithout: twinOf(during),
    generationAfterWithout: twinOf(after),
    stepsPerHourBefore,
    stepsPerHourDuring: Number.isFinite(stepsPerHourBefore) ? rate(f.atS, end + 3600 / stepsPerHourBefore) : null,
    orphaned: f.orphaned,
    resumed: f.resumed,
    returned: f.returned,
  };
}
