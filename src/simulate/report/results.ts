/**
 * results.json: everything a report shows, as data (docs/design/simulator.md, "Outputs"). The
 * tables (tables.ts) and the charts (charts.ts) are functions of this object alone, so a report
 * can be redrawn from a saved results.json without simulating again.
 *
 *   const results = buildResults(scenarios, runs, { wallS });
 *   writeReport(results, 'sim-out/math-7b');
 */
import { chainTiming } from '../fleet/broadcast.js';
import { broadcastStudy, type BroadcastStudy } from '../fleet/broadcast-study.js';
import type { Scenario } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { pushToMasterMs } from '../trainer/time-model.js';
import { compareWithPaper, type ComparisonRow } from './paper-comparison.js';
import { modelKeyOf, type PaperModel } from './paper.js';

export const RESULTS_VERSION = 1;

/** One scenario of the results: what it is, the assumptions it states, its analytic figures. */
export interface ScenarioSummary {
  name: string;
  description: string;
  task: Scenario['workload']['task'];
  /** The model's name in the scenario (`Qwen2.5-Math-72B`). */
  model: string;
  /** The paper's size class of that model (7B, 32B, 72B), or null for another model. */
  paperModel: PaperModel | null;
  /** The scenario's `notes`: its sources and assumptions, one line each. */
  notes: string[];
  /** Every parameter the runs used (the frozen scenario itself). */
  scenario: Scenario;
  /** The trainer's push of a version into the master relay (§8.3's actor stall), seconds. */
  actorStallS: number;
  /** A version down a chain of 128 relays from the relays' chunk model (§4.2, appendix C). */
  broadcast128: { relays: number; chunkBytes: number; chunks: number; seconds: number };
  /** T(p) over p = 2 … 128, the bandwidth that gives 1.6 s, and a relay's and the master's repair (fleet/broadcast-study.ts). */
  broadcast: BroadcastStudy;
}

export interface SimulationResults {
  version: typeof RESULTS_VERSION;
  scenarios: ScenarioSummary[];
  /** Every run, in the order it ran: per-step ends, staleness histograms, engines, repack, ledger. */
  runs: ScenarioRunResult[];
  /** The paper's validated figures beside the simulated ones (paper-comparison.ts). */
  comparison: ComparisonRow[];
  totals: { runs: number; events: number; virtualS: number; wallS: number };
}

export function summariseScenario(scenario: Scenario): ScenarioSummary {
  const chain = chainTiming(scenario, 128);
  return {
    name: scenario.name,
    description: scenario.description,
    task: scenario.workload.task,
    model: scenario.model.name,
    paperModel: modelKeyOf(scenario),
    notes: [...scenario.notes],
    scenario,
    actorStallS: pushToMasterMs(scenario) / 1e3,
    broadcast128: { relays: 128, chunkBytes: chain.chunkBytes, chunks: chain.chunks, seconds: chain.completeAfterMs[127]! / 1e3 },
    broadcast: broadcastStudy(scenario),
  };
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
