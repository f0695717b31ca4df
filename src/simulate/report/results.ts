/**
 * results.json: everything a report shows, as data (docs/design/simulator.md, "Outputs"). The
 * tables (tables.ts) and the charts (charts.ts) are functions of this object alone, so a report
 * can be redrawn from a saved results.json without simulating again.
 *
 *   const results = buildResults(scenarios, runs, { wallS });
 *   writeReport(results, 'sim-out/math-7b');
 */
import type { Scenario } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { compareWithPaper, type ComparisonRow } from './paper-comparison.js';
import { summariseScenario, type ScenarioSummary } from './scenario-summary.js';

export { summariseScenario, type ScenarioSummary } from './scenario-summary.js';

export const RESULTS_VERSION = 1;

export interface SimulationResults {
  version: typeof RESULTS_VERSION;
  scenarios: ScenarioSummary[];
  /** Every run, in the order it ran: per-step ends, staleness histograms, engines, repack, ledger. */
  runs: ScenarioRunResult[];
  /** The paper's validated figures beside the simulated ones (paper-comparison.ts). */
  comparison: ComparisonRow[];
  totals: { runs: number; events: number; virtualS: number; wallS: number };
}

/** The results of `runs` of `scenarios` (each run's `scenario` names one of them). */
export function buildResults(scenarios: readonly Scenario[], runs: readonly ScenarioRunResult[], wallS: number): SimulationResults {
  const summaries = scenarios.map(summariseScenario);
  return {
    version: RESULTS_VERSION,
    scenarios: summaries,
    runs: [...runs],
    comparison: compareWithPaper(summaries, runs),
    totals: {
      runs: runs.length,
      events: runs.reduce((n, r) => n + r.events, 0),
      virtualS: runs.reduce((n, r) => n + r.virtualS, 0),
      wallS,
    },
  };
}
