/**
 * What the runs at hand say about each figure of the paper comparison (paper-comparison.ts),
 * computed once: speedups and scaling efficiencies, staleness, repack's effect, the chain's
 * repairs, the tool-call task, a machine failure. Every value is null, or an empty list, when
 * these runs cannot give it.
 */
import type { SystemName } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { failureEffect, type FailureEffect } from './failure-effect.js';
import type { PaperModel } from './paper.js';
import type { ScenarioSummary } from './scenario-summary.js';

/** The paper's baselines of Figure 11 by the simulator's system names. */
export const FIG11_BASELINES: ReadonlyArray<{ key: string; system: SystemName; label: string }> = [
  { key: 'verl', system: 'sync', label: 'sync (verl)' },
  { key: 'one_step', system: 'one-step', label: 'one-step' },
  { key: 'stream', system: 'stream', label: 'stream' },
  { key: 'areal', system: 'areal', label: 'areal (AReaL)' },
];

/** Appendix B's "small cluster scales": at most this many GPUs. */
export const SMALL_SCALE_GPUS = 64;

/** Runs by (scenario, GPUs) and then by system, in the order they first appear. */
export function runsByPoint(runs: readonly ScenarioRunResult[]): Map<string, Map<SystemName, ScenarioRunResult>> {
  const points = new Map<string, Map<SystemName, ScenarioRunResult>>();
  for (const r of runs) {
    const key = `${r.scenario}@${r.gpus}`;
    let bySystem = points.get(key);
    if (bySystem === undefined) points.set(key, (bySystem = new Map<SystemName, ScenarioRunResult>()));
    bySystem.set(r.system, r);
  }
  return points;
}

export const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

export interface ComparisonFacts {
  summaries: readonly ScenarioSummary[];
  /** Figure 11: laminar's speedup over each baseline (by key) at every math (model, GPUs) point. */
  fig11Speedups: Map<string, number[]>;
  /** Laminar's strong-scaling efficiency per math scenario. */
  laminarEfficiency: number[];
  /** Each baseline's mean strong-scaling efficiency over math scenarios, for those that have one. */
  baselineEfficiency: number[];
  /** The best baseline's (by mean) efficiency per math scenario. */
  bestBaselineEfficiencies: number[];
  /** Laminar's speedup over every baseline at the largest cluster of each math scenario (§8.1, appendix B: 3.34×). */
  largestScaleSpeedups: number[];
  /** Laminar's speedup over every baseline at the math points of at most 64 GPUs (appendix B: 1.41×). */
  smallScaleSpeedups: number[];
  /** §2.3: the share of GPU time completely idle, per system, at each math scenario's largest cluster. */
  largestScaleIdle: Map<SystemName, number[]>;
  /** Laminar's math runs of the paper's models. */
  laminarMath: ScenarioRunResult[];
  /** Figure 10's setting (7B on 64 GPUs, laminar): the p90 of inherent staleness per finish-time range. */
  fig10P90s: number[];
  /** 32B on 128 GPUs, with and without repack. */
  withRepack: ScenarioRunResult | undefined;
  withoutRepack: ScenarioRunResult | undefined;
  /** Both repack runs exist and give ratios. */
  repackBoth: boolean;
  /** The first 72B scenario, whose chain study gives §4.2 and §4.3. */
  s72: ScenarioSummary | undefined;
  /** Every chain repair of the runs (runs with failures). */
  runRepairs: ScenarioRunResult['chainRepairs'];
  relayRepairs: number[];
  masterRepairs: number[];
  /** Whether the 72B study's relay repair was a splice (true without a 72B scenario). */
  splices: boolean;
  /** Figure 12: laminar's speedups over every baseline on the tool-call scenarios, and its scaling efficiency there. */
  toolSpeedups: number[];
  toolEfficiency: number[];
  /** The best baseline's mean strong-scaling efficiency on the tool-call scenarios (the paper: stream, 12.9 %). */
  toolBaselineEfficiency: number | null;
  /** §8.5: the machine failure of a run (32B on 128 GPUs first), and what it did. */
  failure: FailureEffect | undefined;
  failureBasis: string;
  /**
   * Generation during the outage and after the replacement over the same windows of the run
   * without the failure (failure-effect.ts says why not over the span before it); null without
   * that twin in the results.
   */
  generationDrop: number | null;
  trainingRatio: number | null;
  generationRecovered: number | null;
}

/** Laminar's speedup over `baseline` at every (scenario, GPUs) point of `runs` where both ran. */
function speedups(runs: readonly ScenarioRunResult[], baseline: SystemName): number[] {
  const out: number[] = [];
  for (const bySystem of runsByPoint(runs).values()) {
    const l = bySystem.get('laminar');
    const b = bySystem.get(baseline);
    if (l && b && b.throughput.tokensPerS > 0) out.push(l.throughput.tokensPerS / b.throughput.tokensPerS);
  }
  return out;
}

/** Strong-scaling efficiency of `system` per scenario of `runs` with two sizes or more: (thr at largest / at smallest) / (GPU ratio). */
function scalingEfficiencies(summaries: readonly ScenarioSummary[], runs: readonly ScenarioRunResult[], system: SystemName): number[] {
  const out: number[] = [];
  for (const s of summaries) {
    const rs = runs.filter((r) => r.scenario === s.name && r.system === system).sort((a, b) => a.gpus - b.gpus);
    if (rs.length < 2) continue;
    const small = rs[0]!;
    const large = rs[rs.length - 1]!;
    if (small.throughput.tokensPerS > 0) out.push(large.throughput.tokensPerS / small.throughput.tokensPerS / (large.gpus / small.gpus));
  }
  return out;
}

export function comparisonFacts(summaries: readonly ScenarioSummary[], runs: readonly ScenarioRunResult[]): ComparisonFacts {
  const modelOf = new Map(summaries.map((s) => [s.name, s.paperModel]));
  const math = new Set(summaries.filter((s) => s.task === 'math' && s.paperModel !== null).map((s) => s.name));
  const mathRuns = runs.filter((r) => math.has(r.scenario));
  const runOf = (model: PaperModel, gpus: number, system: SystemName): ScenarioRunResult | undefined =>
    runs.find((r) => modelOf.get(r.scenario) === model && r.gpus === gpus && r.system === system);

  const fig10 = runOf('7B', 64, 'laminar');
  const withRepack = runOf('32B', 128, 'laminar');
  const withoutRepack = runOf('32B', 128, 'laminar-no-repack');
  const s72 = summaries.find((s) => s.paperModel === '72B');
  const runRepairs = runs.flatMap((r) => r.chainRepairs);
  const toolNames = new Set(summaries.filter((x) => x.task === 'tool-call').map((x) => x.name));
  const toolRuns = runs.filter((r) => toolNames.has(r.scenario));
  const effects = runs.map(failureEffect).filter((e) => e !== null);
  const failure = effects.find((e) => modelOf.get(e.scenario) === '32B' && e.gpus === 128) ?? effects[0];
  const perBaseline = FIG11_BASELINES.map((b) => scalingEfficiencies(summaries, mathRuns, b.system)).filter((xs) => xs.length > 0);
  const best = perBaseline.reduce<number[] | null>((a, xs) => (a === null || mean(xs) > mean(a) ? xs : a), null);
  const largest = new Map<string, number>();
  for (const r of mathRuns) largest.set(r.scenario, Math.max(largest.get(r.scenario) ?? 0, r.gpus));
  const toolBaselines = FIG11_BASELINES.map((b) => scalingEfficiencies(summaries, toolRuns, b.system))
    .filter((xs) => xs.length > 0)
    .map(mean);

  return {
    summaries,
    fig11Speedups: new Map(FIG11_BASELINES.map((b) => [b.key, speedups(mathRuns, b.system)])),
    laminarEfficiency: scalingEfficiencies(summaries, mathRuns, 'laminar'),
    baselineEfficiency: perBaseline.map(mean),
    bestBaselineEfficiencies: best ?? [],
    largestScaleSpeedups: FIG11_BASELINES.flatMap((b) =>
      speedups(
        mathRuns.filter((r) => r.gpus === largest.get(r.scenario)),
        b.system,
      ),
    ),
    smallScaleSpeedups: FIG11_BASELINES.flatMap((b) =>
      speedups(
        mathRuns.filter((r) => r.gpus <= SMALL_SCALE_GPUS),
        b.system,
      ),
    ),
    largestScaleIdle: new Map(
      (['sync', 'one-step'] as const).map((system) => [
        system,
        mathRuns.filter((r) => r.system === system && r.gpus === largest.get(r.scenario)).map((r) => r.idleGpuShare),
      ]),
    ),
    laminarMath: mathRuns.filter((r) => r.system === 'laminar'),
    fig10P90s: fig10 ? fig10.staleness.inherentByVersion.filter((v) => v.count > 0).map((v) => v.p90) : [],
    withRepack,
    withoutRepack,
    repackBoth: withRepack !== undefined && withoutRepack !== undefined && withoutRepack.kvUtilisation > 0 && withoutRepack.generationTokensPerS > 0,
    s72,
    runRepairs,
    relayRepairs: [...(s72 ? [s72.broadcast.relayRepair.repairS] : []), ...runRepairs.filter((x) => !x.wasMaster).map((x) => x.repairS)],
    masterRepairs: [...(s72 ? [s72.broadcast.masterRepair.repairS] : []), ...runRepairs.filter((x) => x.wasMaster).map((x) => x.repairS)],
    splices: s72 ? s72.broadcast.relayRepair.splice : true,
    toolSpeedups: FIG11_BASELINES.flatMap((b) => speedups(toolRuns, b.system)),
    toolEfficiency: scalingEfficiencies(summaries, toolRuns, 'laminar'),
    toolBaselineEfficiency: toolBaselines.length > 0 ? Math.max(...toolBaselines) : null,
    failure,
    failureBasis: failure
      ? `${failure.scenario} on ${failure.gpus} GPUs: ${failure.rolloutsLost} of ${failure.rolloutsBefore} rollouts lost at ${failure.atS.toFixed(0)} s, replaced at ${failure.backAtS === null ? 'never' : `${failure.backAtS.toFixed(0)} s`}`
      : 'a run with a machine failure (failure-32b-128)',
    generationDrop:
      failure && failure.generationDuringWithout !== null && failure.generationDuringWithout > 0
        ? failure.generationDuring / failure.generationDuringWithout
        : null,
    trainingRatio:
      failure && failure.stepsPerHourDuring !== null && failure.stepsPerHourBefore > 0 ? failure.stepsPerHourDuring / failure.stepsPerHourBefore : null,
    generationRecovered:
      failure && failure.generationAfter !== null && failure.generationAfterWithout !== null && failure.generationAfterWithout > 0
        ? failure.generationAfter / failure.generationAfterWithout
        : null,
  };
}
