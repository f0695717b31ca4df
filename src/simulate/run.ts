/**
 * One simulated run: a scenario, a system, a row of its placement table, a number of training
 * steps. Builds the run's context, hands it to the system's driver, runs the simulation until the
 * trainer has completed the steps, and returns the measurements (systems/run-context.ts) with
 * the ledger audited.
 *
 *   const result = runScenario(loadScenario('src/simulate/scenarios/math-7b.json'), 'laminar', { steps: 5 });
 */
import { performance } from 'node:perf_hooks';
import { ErrorCodes, InvalidInputError, LaminarError } from '../common/errors.js';
import { checkToolSchedule, type ToolSchedule } from './agentic/tool-schedule.js';
import { REAL_COMPONENTS, type SimComponents } from './components.js';
import { ALL_MECHANISMS, type Mechanisms } from './mechanisms.js';
import { eagerFloorMs, engineProfileFor } from './scenario/derive.js';
import { placementOf } from './scenario/placement.js';
import type { Scenario, SystemName } from './scenario/schema.js';
import { runAreal } from './systems/areal.js';
import { colocatedProfile } from './systems/colocated-engine.js';
import { runLaminar } from './systems/laminar.js';
import { runOneStep } from './systems/one-step.js';
import { RunContext, type ScenarioRunResult } from './systems/run-context.js';
import { runStream } from './systems/stream.js';
import { runSync } from './systems/sync.js';

export interface RunScenarioOptions {
  /** Training steps to simulate (default: the scenario's run.steps). */
  steps?: number;
  /** Steps left out of the throughput (default: the scenario's, at most steps − 1). */
  warmupSteps?: number;
  /** The placement row's cluster size (default: the first row). */
  gpus?: number;
  /** Replace some of the real components (tests plant changes this way). */
  components?: Partial<SimComponents>;
  /** A guard against a run that never reaches its steps (default 50 M events). */
  maxEvents?: number;
  /** Switch mechanisms off (mechanisms.ts; default: all on). */
  mechanisms?: Partial<Mechanisms>;
  /**
   * How laminar schedules the tool-call task's turns (issue #49, agentic/tool-schedule.ts);
   * laminar and laminar-no-repack on a tool-call scenario only. Default: as before the issue.
   */
  toolSchedule?: ToolSchedule;
  /**
   * Sample the per-window timeline even without failures (default: only with them). runScenario
   * sets it for the failure-free twin of a run with a machine failure.
   */
  sampleTimeline?: boolean;
}

/** The systems with a driver (every one of SYSTEMS). */
export const SIMULATED_SYSTEMS: readonly SystemName[] = ['laminar', 'laminar-no-repack', 'one-step', 'stream', 'sync', 'areal'];

export function runScenario(scenario: Scenario, system: SystemName, options: RunScenarioOptions = {}): ScenarioRunResult {
  const steps = options.steps ?? scenario.run.steps;
  if (!Number.isSafeInteger(steps) || steps < 1)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `steps must be a positive integer, got ${steps}`, { steps });
  const warmupSteps = Math.min(options.warmupSteps ?? scenario.run.warmupSteps, steps - 1);
  const row = options.gpus === undefined ? scenario.placements[0]! : scenario.placements.find((p) => p.gpus === options.gpus);
  if (row === undefined)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${scenario.name} has no placement row for ${options.gpus} GPUs`, { gpus: options.gpus });
  const placement = placementOf(scenario, row, system);
  if (placement === null)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${scenario.name} places no ${system} on ${row.gpus} GPUs`, { system, gpus: row.gpus });
  if (!SIMULATED_SYSTEMS.includes(system)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${system} is not simulated yet`, { system });
  const toolSchedule = options.toolSchedule === undefined ? null : checkToolSchedule(options.toolSchedule);
  if (toolSchedule !== null && (scenario.workload.toolCalls === null || !system.startsWith('laminar')))
    throw new InvalidInputError(
      ErrorCodes.INVALID_ARG,
      `a tool-call schedule is for laminar's runs of a tool-call scenario, not ${system} on ${scenario.name}`,
      {
        system,
      },
    );
  const components: SimComponents = { ...REAL_COMPONENTS, ...options.components };
  const mechanisms: Mechanisms = { ...ALL_MECHANISMS, ...options.mechanisms };
  // sync's engines share their GPUs with its trainer (systems/colocated-engine.ts).
  const graphed = system === 'sync' ? colocatedProfile(scenario, placement.tp, mechanisms) : engineProfileFor(scenario, placement.tp, mechanisms);
  // The verl-based baselines' vLLM runs eagerly (mechanism eagerDecode): a step takes at least its launches.
  const profile = mechanisms.eagerDecode && scenario.eager.systems.includes(system) ? { ...graphed, eagerFloorMs: eagerFloorMs(scenario) } : graphed;
  const ctx = new RunContext(scenario, placement, profile, steps, warmupSteps, mechanisms, toolSchedule);
  ctx.sampleTimeline = options.sampleTimeline === true;

  const started = performance.now();
  if (system === 'sync') runSync(ctx);
  else if (system === 'one-step') runOneStep(ctx);
  else if (system === 'stream') runStream(ctx);
  else if (system === 'areal') runAreal(ctx);
  else
    runLaminar(ctx, {
      repack: system === 'laminar',
      round: components.repackRoundGroups,
      planner: components.planRepack,
      claim: components,
      broadcast: components,
      chain: components,
      orphanDestination: components.orphanDestination,
    });
  const { events } = ctx.sim.run({ maxEvents: options.maxEvents ?? 50_000_000 });
  const wallMs = performance.now() - started;
  if (ctx.stepsDone < steps) {
    throw new LaminarError(ErrorCodes.INTERNAL, `${system} stopped after ${ctx.stepsDone} of ${steps} steps (${events} events, t = ${ctx.sim.now} ms)`, {
      details: { system, steps, stepsDone: ctx.stepsDone, events },
    });
  }
  const result = ctx.result(events, wallMs);
  if (result.failures.some((f) => f.kind === 'machine')) {
    // §8.5's drop "due to the loss of rollouts" is the run against itself without the failure,
    // window by window. The windows before the failure are not that: a rollout's generation rate
    // follows its claim's life (fresh claims decode many short contexts, their tails a few long
    // ones) and the rollouts' claims follow the trainer's versions, so the span before a failure
    // struck as a step starts is another phase of that cycle than the span after it.
    const twin = runScenario({ ...scenario, failures: [] }, system, { ...options, sampleTimeline: true });
    result.timelineWithoutFailures = twin.timeline;
  }
  return result;
}
