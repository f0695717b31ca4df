/**
 * The cluster simulator (issue #27, docs/design/simulator.md): the discrete-event core, the
 * leaping engine, the workload, the scenario files it runs, and the systems it compares
 * (`runScenario`).
 */
export { EventQueue } from './core/event-queue.js';
export { Simulation, VirtualClock, Wake, type RunEnd, type RunOptions, type RunResult, type SimEvent } from './core/simulation.js';
export { EngineActor, type EngineActorOwner } from './engine/engine-actor.js';
export { LeapEngine, type EngineLoadView, type LeapEngineStats, type LeapListener, type LeapRequest } from './engine/leap-engine.js';
export { Workload } from './workload/workload.js';
export { decodeStepMs, engineProfileFor, kvCapacityTokens, prefillMsPerToken, weightBytes } from './scenario/derive.js';
export { ScenarioError, ScenarioUnreadableError } from './scenario/errors.js';
export { jsonPath, loadScenario, parseScenario } from './scenario/load.js';
export { placementOf, tpOf, type RunPlacement } from './scenario/placement.js';
export { SYSTEMS, scenarioSchema, type Failure, type Placement, type Scenario, type ScenarioInput, type SystemName } from './scenario/schema.js';
export { REAL_COMPONENTS, type SimComponents } from './components.js';
export { Ledger, TrajectoryState, type LedgerTotals } from './ledger.js';
export { runScenario, SIMULATED_SYSTEMS, type RunScenarioOptions } from './run.js';
export type { ScenarioRunResult } from './systems/run-context.js';
export type { StalenessSummary } from './metrics/staleness.js';
