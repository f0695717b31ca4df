/**
 * Issue #49's study in the cluster simulator: the tool-call task run by laminar with its
 * scheduling before the issue, with each of the issue's scheduling mechanisms added in turn, and
 * with a step-centric router, on the same workload and GPUs, the tools unbounded (the scenario's
 * sandbox, as every other simulated figure): the rollout-throughput gain of the new scheduling
 * over laminar's before it (`sim_toolcall_gain_1024` at 1,024 GPUs), printed beside the seed
 * papers' published figures (seed-figures.ts).
 *
 * Then the tools, in two more runs at one budget of sandbox slots: laminar before #49 with static
 * tools, all of #49 with elastic ones. The budget is sized for the demand: the calls in flight on
 * average (Σ latency / run time) in the `before` run, rounded up to whole slots per rollout.
 * Static gives each rollout its share (a worker's tools sized for its mean load); elastic pools
 * them (tool-schedule.ts).
 *
 * Rollout throughput is the engines' decoded tokens per second over the run (Heddle's "end-to-end
 * rollout throughput (tokens/s)"); the training throughput is reported beside it, since laminar's
 * trainer may be what bounds a job whatever its rollouts do.
 */
import { runScenario } from '../run.js';
import { parseScenario } from '../scenario/load.js';
import type { Scenario, ScenarioInput } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { ISSUE_49, LAMINAR_BEFORE_49, type ToolSchedule } from './tool-schedule.js';

export interface StudyRow {
  key: string;
  /** What the row changes, for the table. */
  what: string;
  schedule: ToolSchedule;
  result: ScenarioRunResult;
}

export interface ToolCallStudy {
  scenario: string;
  gpus: number;
  steps: number;
  rollouts: number;
  /** The sandbox slots of the two tools rows (the `before` row's mean calls in flight, rounded up per rollout). */
  toolBudget: number;
  rows: StudyRow[];
  /** Rollout (decode) throughput, #49's scheduling over laminar before it, tools unbounded; and over the step-centric router. */
  gain: number;
  gainOverStepCentric: number;
  /** Rollout throughput, all of #49 with elastic tools over laminar before it with static ones, at the same slots. */
  gainWithTools: number;
  /** Training throughput, #49's scheduling over laminar before it, tools unbounded. */
  trainingGain: number;
  /** Mean action completion time (latency + wait for a slot), static tools before #49 over elastic ones with all of #49. */
  actGain: number;
}

export interface StudyOptions {
  gpus: number;
  steps: number;
  warmupSteps?: number;
  progress?: (row: StudyRow, index: number, total: number) => void;
}

/** The scheduling rows, tools unbounded: laminar before #49, each mechanism added in turn, the step-centric router. */
const SCHEDULING_ROWS: readonly { key: string; what: string; schedule: ToolSchedule }[] = [
  { key: 'before', what: 'laminar before #49: FCFS engines, turns back to their rollout, Algorithm 1', schedule: LAMINAR_BEFORE_49 },
  {
    key: 'priority',
    what: '+ progressive priority (length predictor per rollout, longest predicted first)',
    schedule: { ...LAMINAR_BEFORE_49, priority: 'longest-predicted' },
  },
  {
    key: 'new',
    what: "+ dp planner: presorted DP placement, moves at tool calls, in place of Algorithm 1 (#49's scheduling)",
    schedule: { ...LAMINAR_BEFORE_49, priority: 'longest-predicted', placement: 'dp-at-tool' },
  },
  {
    key: 'step-centric',
    what: 'step-centric: least-load placement of every turn, FCFS, Algorithm 1',
    schedule: { ...LAMINAR_BEFORE_49, placement: 'least-load' },
  },
];

/** The tools rows, at the budget: laminar before #49 with static tools, and all of #49 with elastic ones. */
function toolRows(budget: number): { key: string; what: string; schedule: ToolSchedule }[] {
  return [
    {
      key: 'before-static',
      what: `laminar before #49, ${budget} slots provisioned per rollout (static)`,
      schedule: { ...LAMINAR_BEFORE_49, tools: { budget, provisioning: 'static' } },
    },
    {
      key: 'all-elastic',
      what: `all of #49, the same ${budget} slots pooled (elastic)`,
      schedule: { ...ISSUE_49, tools: { budget, provisioning: 'elastic' } },
    },
  ];
}

export function runToolCallStudy(scenario: Scenario, options: StudyOptions): ToolCallStudy {
  const { gpus, steps, warmupSteps } = options;
  const rows: StudyRow[] = [];
  const total = SCHEDULING_ROWS.length + 2;
  const run = (key: string, what: string, schedule: ToolSchedule): void => {
    const result = runScenario(scenario, 'laminar', { gpus, steps, warmupSteps, toolSchedule: schedule });
    const row = { key, what, schedule, result };
    rows.push(row);
    options.progress?.(row, rows.length - 1, total);
  };
  for (const r of SCHEDULING_ROWS) run(r.key, r.what, r.schedule);
  const by = (key: string): ScenarioRunResult => rows.find((r) => r.key === key)!.result;
  // The tools' demand, from laminar before #49 with them unbounded.
  const rollouts = by('before').placement.rollouts;
  const budget = Math.max(1, Math.ceil(by('before').toolSchedule!.meanCallsInFlight / rollouts)) * rollouts;
  for (const r of toolRows(budget)) run(r.key, r.what, r.schedule);
  const ratio = (a: number, b: number): number => (b > 0 ? a / b : 0);
  return {
    scenario: scenario.name,
    gpus,
    steps,
    rollouts,
    toolBudget: budget,
    rows,
    gain: ratio(by('new').generationTokensPerS, by('before').generationTokensPerS),
    gainOverStepCentric: ratio(by('new').generationTokensPerS, by('step-centric').generationTokensPerS),
    gainWithTools: ratio(by('all-elastic').generationTokensPerS, by('before-static').generationTokensPerS),
    trainingGain: ratio(by('new').throughput.tokensPerS, by('before').throughput.tokensPerS),
    actGain: ratio(by('before-static').toolSchedule!.meanCallS, by('all-elastic').toolSchedule!.meanCallS),
  };
}

/**
 * A math scenario turned into the tool-call task: `tools`'s tool calls (and task) grafted onto
 * `base`, as `laminar plan --tool-calls` does for the models without a tool-call scenario; named
 * `toolcall-<model part of base>` (math-72b → toolcall-72b).
 */
export function withToolCallsOf(base: ScenarioInput, tools: ScenarioInput): Scenario {
  const input = structuredClone(base);
  input.name = input.name.replace(/^math-/, 'toolcall-');
  input.workload.task = 'tool-call';
  input.workload.toolCalls = structuredClone(tools.workload.toolCalls);
  return parseScenario(input, input.name);
}
