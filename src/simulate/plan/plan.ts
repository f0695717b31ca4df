/**
 * `laminar plan`'s work (docs/components/simulator.md, "Sizing a job"): on the plan's scenario
 * (plan-scenario.ts), simulate laminar on a coarse grid of whole-machine splits (grid.ts) with
 * runScenario, most trainer GPUs first, leaving out the splits whose trainer cannot reach the best
 * throughput already seen; refine around the best to whole machines (halving the gaps to its
 * neighbours, as a bisection on a throughput that rises with the rollouts until the trainer is
 * the bottleneck and falls after); choose the best (choice.ts); give the chunk size the relays'
 * `chooseChunkSize` picks for its chain and the repack interval for its trainer step; and, where
 * that interval is not the one the grid ran with, simulate the best split once more with it, so
 * that the staleness reported is that of the configuration recommended.
 *
 *   const plan = planJob(planScenario(parsePlanFlags({ model: '7B', gpus: '64' })).scenario, { steps: 10, splits: 8 });
 */
import { performance } from 'node:perf_hooks';
import { REAL_COMPONENTS, type SimComponents } from '../components.js';
import { linkOf } from '../fleet/broadcast.js';
import { runScenario } from '../run.js';
import { weightBytes } from '../scenario/derive.js';
import { placementOf, type RunPlacement } from '../scenario/placement.js';
import type { Scenario } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { TIE_FRACTION, chooseSplit, repackIntervalFor, trainerStepS } from './choice.js';
import { trainerCeiling, trainerMachineGrid } from './grid.js';
import { withSplit } from './plan-scenario.js';

export interface PlanOptions {
  /** Training steps per simulated split. */
  steps: number;
  /** At most this many trainer sizes (grid.ts). */
  splits: number;
  /** Replace some of the real components, in the runs and in the recommendation (tests plant changes this way). */
  components?: Partial<SimComponents>;
  progress?: (event: PlanProgress) => void;
}

/** A split of the coarse grid, or one simulated to refine the grid around the best. */
export type PlanStage = 'grid' | 'refine';

export interface SplitRow {
  placement: RunPlacement;
  stage: PlanStage;
  /** Rollout replicas per trainer GPU: the split as the design states it. */
  rolloutsPerTrainGpu: number;
  /** The most tokens/s its trainer can train (grid.ts). */
  ceilingTokensPerS: number;
  /** null: not simulated, its ceiling being below the best throughput already simulated. */
  result: ScenarioRunResult | null;
}

/** A split that was simulated. */
export type SimulatedRow = SplitRow & { result: ScenarioRunResult };

/** Where a split is in the search: its index in the grid (of `total`), or in the refinement (total null). */
interface SearchPosition {
  stage: PlanStage;
  index: number;
  total: number | null;
}

export type PlanProgress =
  | ({ kind: 'simulated'; row: SplitRow } & SearchPosition)
  | ({ kind: 'skipped'; row: SplitRow; bestTokensPerS: number } & SearchPosition)
  | { kind: 'confirmed'; row: SplitRow; repackIntervalS: number; result: ScenarioRunResult };

export interface PlanResult {
  scenario: Scenario;
  gpus: number;
  machines: number;
  steps: number;
  warmupSteps: number;
  /** Every split considered (the grid, then the refinement), most trainer GPUs first. */
  rows: SplitRow[];
  /** Trainer sizes of the coarse grid. */
  gridSize: number;
  best: SimulatedRow;
  reason: string;
  /** What the relays' chooseChunkSize picks for the best split's chain. */
  chunk: { relays: number; bytes: number; chunks: number; broadcastS: number; linkBytesPerS: number; perChunkS: number };
  /** The best split's trainer step (median interval between actor updates after the warm-up), s. */
  trainerStepS: number;
  repackIntervalS: number;
  /** The run whose staleness the plan reports: the best split's, again with the recommended repack interval where it differs. */
  final: ScenarioRunResult;
  /** Whether `final` is that second run. */
  confirmed: boolean;
  events: number;
  wallS: number;
}

/** The warm-up left out of each run's throughput: half the steps (the pipeline fills in the first). */
export const warmupOf = (steps: number): number => Math.floor(steps / 2);

export function planJob(scenario: Scenario, options: PlanOptions): PlanResult {
  const started = performance.now();
  const components: SimComponents = { ...REAL_COMPONENTS, ...options.components };
  const gpus = scenario.placements[0]!.gpus;
  const perMachine = scenario.hardware.gpusPerMachine;
  const machines = gpus / perMachine;
  const warmupSteps = warmupOf(options.steps);
  const run = (s: Scenario): ScenarioRunResult => runScenario(s, 'laminar', { steps: options.steps, warmupSteps, components });

  const grid = trainerMachineGrid(machines, options.splits);
  /** Every split considered, by trainer machines. */
  const rows = new Map<number, SplitRow>();
  let fastest = 0;
  let events = 0;
  let refined = 0;

  function consider(trainMachines: number, stage: PlanStage): void {
    const s = withSplit(scenario, trainMachines * perMachine);
    const placement = placementOf(s, s.placements[0]!, 'laminar')!;
    const row: SplitRow = {
      placement,
      stage,
      rolloutsPerTrainGpu: placement.rollouts / placement.trainGpus,
      ceilingTokensPerS: trainerCeiling(s, placement.trainGpus),
      result: null,
    };
    rows.set(trainMachines, row);
    const at = stage === 'grid' ? { stage, index: rows.size - 1, total: grid.length } : { stage, index: refined++, total: null };
    // A split within TIE_FRACTION of the fastest could still be chosen for its staleness: those are simulated too.
    if (row.ceilingTokensPerS < fastest * (1 - TIE_FRACTION)) {
      options.progress?.({ kind: 'skipped', ...at, row, bestTokensPerS: fastest });
      return;
    }
    row.result = run(s);
    events += row.result.events;
    fastest = Math.max(fastest, row.result.throughput.tokensPerS);
    options.progress?.({ kind: 'simulated', ...at, row });
  }

  const choose = () => {
    const simulated = [...rows.values()].filter((r): r is SimulatedRow => r.result !== null);
    return chooseSplit(
      simulated.map((row) => ({
        row,
        trainGpus: row.placement.trainGpus,
        rolloutGpus: row.placement.rolloutGpus,
        tokensPerS: row.result.throughput.tokensPerS,
        inherent: row.result.staleness.inherent,
        consumption: row.result.staleness.consumption,
      })),
    );
  };

  for (const trainMachines of grid) consider(trainMachines, 'grid');
  // Refine to whole machines: halve the gaps on both sides of the best until its neighbours are
  // one machine away (about 2 log2(gap) splits more, fewer where the ceiling rules them out).
  // 0 and all the machines stand for the ends, so that a grid of one split is refined too.
  for (;;) {
    const at = choose().best.row.placement.trainGpus / perMachine;
    const considered = [0, ...[...rows.keys()].sort((a, b) => a - b), machines];
    const i = considered.indexOf(at);
    const between = [considered[i - 1]!, considered[i + 1]!].map((n) => Math.round((at + n) / 2)).filter((m) => m >= 1 && m < machines && !rows.has(m));
    if (between.length === 0) break;
    for (const m of between) consider(m, 'refine');
  }

  const choice = choose();
  const bestRow = choice.best.row;

  const link = linkOf(scenario);
  const relays = Math.max(1, bestRow.placement.rolloutMachines);
  const picked = components.chooseChunkSize(weightBytes(scenario), relays, link);
  const stepS = trainerStepS(bestRow.result.stepEndsS, warmupSteps);
  const repackIntervalS = repackIntervalFor(stepS);

  let final = bestRow.result;
  const confirmed = repackIntervalS !== scenario.manager.repackIntervalS;
  if (confirmed) {
    final = run(withSplit(scenario, bestRow.placement.trainGpus, repackIntervalS));
    events += final.events;
    options.progress?.({ kind: 'confirmed', row: bestRow, repackIntervalS, result: final });
  }

  return {
    scenario,
    gpus,
    machines,
    steps: options.steps,
    warmupSteps,
    rows: [...rows.values()].sort((a, b) => b.placement.trainGpus - a.placement.trainGpus),
    gridSize: grid.length,
    best: bestRow,
    reason: choice.reason,
    chunk: { relays, bytes: picked.chunkSize, chunks: picked.chunks, broadcastS: picked.modelSeconds, linkBytesPerS: link.bandwidth, perChunkS: link.startup },
    trainerStepS: stepS,
    repackIntervalS,
    final,
    confirmed,
    events,
    wallS: (performance.now() - started) / 1e3,
  };
}
