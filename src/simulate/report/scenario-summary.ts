/**
 * One scenario of the results (results.ts): what it is, the assumptions it states, and its
 * analytic figures, which the paper comparison (paper-comparison.ts) reads beside the runs.
 */
import { chainTiming } from '../fleet/broadcast.js';
import { broadcastStudy, type BroadcastStudy } from '../fleet/broadcast-study.js';
import type { Scenario } from '../scenario/schema.js';
import { pushToMasterMs } from '../trainer/time-model.js';
import { modelKeyOf, type PaperModel } from './paper.js';

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
