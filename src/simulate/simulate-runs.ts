/**
 * The runs a `laminar simulate` call asks for: every (scenario, placement row, system) the
 * options select, run one after the other with runScenario, reporting each start and end to a
 * progress callback (the CLI prints them on stderr, the bench stays quiet), then the results
 * (report/results.ts).
 *
 *   const results = simulateRuns([loadScenario(path)], { systems: ['laminar', 'sync'], steps: 6 });
 */
import { performance } from 'node:perf_hooks';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';
import { buildResults, type SimulationResults } from './report/results.js';
import { runScenario } from './run.js';
import { placementOf } from './scenario/placement.js';
import type { Mechanisms } from './mechanisms.js';
import { SYSTEMS, type Scenario, type SystemName } from './scenario/schema.js';
import type { ScenarioRunResult } from './systems/run-context.js';

export interface SimulateOptions {
  /** Systems to run (default: each scenario's `systems`). */
  systems?: readonly SystemName[];
  /** Placement rows by cluster size (default: every row). */
  gpus?: readonly number[];
  /** Training steps per run (default: the scenario's run.steps). */
  steps?: number;
  /** Warm-up steps left out of the throughput (default: the scenario's, at most steps − 1). */
  warmupSteps?: number;
  /** Mechanisms switched on or off (mechanisms.ts; default: all on). */
  mechanisms?: Partial<Mechanisms>;
  progress?: (event: ProgressEvent) => void;
}

export interface PlannedRun {
  scenario: Scenario;
  system: SystemName;
  gpus: number;
  steps: number;
}

export type ProgressEvent =
  { kind: 'start'; index: number; total: number; run: PlannedRun } | { kind: 'end'; index: number; total: number; run: PlannedRun; result: ScenarioRunResult };

/** Parses `--system a,b`: every name must be one of SYSTEMS (ERR_INVALID_ARG otherwise). */
export function parseSystems(list: string): SystemName[] {
  const names = list
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const bad = names.filter((s) => !(SYSTEMS as readonly string[]).includes(s));
  if (names.length === 0 || bad.length > 0)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--system takes a comma-separated list of ${SYSTEMS.join(', ')}; got ${list}`, { system: list });
  return names as SystemName[];
}

/** The runs the options select, in scenario order, then GPUs, then system; a selection of nothing is an error. */
export function planRuns(scenarios: readonly Scenario[], options: SimulateOptions = {}): PlannedRun[] {
  const runs: PlannedRun[] = [];
  for (const scenario of scenarios) {
    const rows = options.gpus === undefined ? scenario.placements : scenario.placements.filter((p) => options.gpus!.includes(p.gpus));
    const systems = options.systems ?? scenario.systems;
    for (const row of rows) {
      for (const system of systems) {
        if (placementOf(scenario, row, system) === null) continue;
        runs.push({ scenario, system, gpus: row.gpus, steps: options.steps ?? scenario.run.steps });
      }
    }
  }
  if (runs.length === 0) {
    const sizes = [...new Set(scenarios.flatMap((s) => s.placements.map((p) => p.gpus)))].join(', ');
    throw new InvalidInputError(
      ErrorCodes.INVALID_ARG,
      `nothing to simulate: no placement row of ${scenarios.map((s) => s.name).join(', ')} has ${options.gpus ? `${options.gpus.join(', ')} GPUs` : 'those systems'} (rows: ${sizes})`,
      { gpus: options.gpus, systems: options.systems },
    );
  }
  return runs;
}

export function simulateRuns(scenarios: readonly Scenario[], options: SimulateOptions = {}): SimulationResults {
  const planned = planRuns(scenarios, options);
  const started = performance.now();
  const results: ScenarioRunResult[] = [];
  planned.forEach((run, index) => {
    options.progress?.({ kind: 'start', index, total: planned.length, run });
    const result = runScenario(run.scenario, run.system, {
      gpus: run.gpus,
      steps: run.steps,
      warmupSteps: options.warmupSteps,
      mechanisms: options.mechanisms,
    });
    results.push(result);
    options.progress?.({ kind: 'end', index, total: planned.length, run, result });
  });
  return buildResults(scenarios, results, (performance.now() - started) / 1e3);
}
