/**
 * `npm run bench -- agentic [--only predictor,sched] [--steps 3] [--prompts 512]
 *   [--sched-workload tool-waits|long-answers] [--sched-groups N] [--sched-group-size N]
 *   [--sched-max-running N] [--sched-in-flight N] [--sched-at-tools N] [--sched-tool-ms MS]
 *   [--sched-step-ms MS] [--sched-preemption-threshold off|N] [--sched-rounds 4] [--sched-configs before,priority,claims,no-moves,median,all,free-moves]`
 *   (the job's shape, groups to tools, defaults to the workload's own: WORKLOAD_DEFAULTS)
 *
 * Issue #49's agentic scheduling figures, in sections (`--only`; default: both):
 *   predictor: `predictor_mae_over_baseline`, the mean absolute error of the remaining-length
 *              predictor (src/manager/agentic/length-predictor.ts) over that of the
 *              group's-median-so-far baseline, both replayed over the same turn-by-turn traces of
 *              the simulator's tool-call task (toolcall-7b's workload,
 *              src/simulate/workload/turn-traces.ts). The first step trains both and is not scored.
 *   sched:     `sched_throughput_gain`, trajectories per second of a batch of groups on the demo's
 *              tool task with reference engines, all of #49's scheduling on over laminar's before
 *              it, and each mechanism on and off, interleaved round by round, with each
 *              configuration's median and spread (agentic-sched.ts; at the defaults 7
 *              configurations x 5 batches of 20-30 s: about twenty minutes). The workload's long
 *              tail is in turns (`tool-waits`, the default) or in generated tokens
 *              (`long-answers`; agentic-workloads.ts). The dp planner's re-prefill cost is
 *              measured on a reference engine once the warm-up round has loaded its weights
 *              (agentic-prefill.ts; the warm-up's moves are free) and printed. So is the batch's
 *              regime (agentic-regime.ts): its work over the engines' capacity beside its
 *              critical path, and the least makespan they allow; per configuration, its
 *              makespan over that bound and where the rest went (the engines' busy timelines,
 *              the trajectory that ended last).
 *              `--sched-step-ms`: each engine step takes that much longer without using a CPU
 *              (a GPU's step time), so that the engines, not the two CPU cores, are saturated.
 *              `--sched-preemption-threshold`: the engines' priority preemption threshold (SGLang's
 *              flag, whose default is 10, in the agents' priority unit, milliseconds); `off` (the
 *              default) for none: the engines order their queue by priority and never retract.
 * Prints a table per section, then one JSON line (the last line of stdout).
 */
import { parseArgs } from 'node:util';
import { GroupMedianBaseline } from '../src/manager/agentic/group-median-baseline.js';
import { LengthPredictor } from '../src/manager/agentic/length-predictor.js';
import { replayPredictions, type PredictionError } from '../src/manager/agentic/prediction-replay.js';
import { resolveScenarioPath } from '../src/simulate/files.js';
import { loadScenario } from '../src/simulate/scenario/load.js';
import { turnTraces } from '../src/simulate/workload/turn-traces.js';
import { Workload } from '../src/simulate/workload/workload.js';
import { CONFIG_KEYS, schedSection, type ConfigKey, type SchedResult } from './agentic-sched.js';
import { DEFAULT_WORKLOAD, SCHED_WORKLOADS, WORKLOAD_DEFAULTS, type SchedWorkload } from './agentic-workloads.js';
import { positiveInt, printTable, round } from './support.js';

const SECTIONS = ['predictor', 'sched'] as const;

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      only: { type: 'string', default: SECTIONS.join(',') },
      steps: { type: 'string', default: '3' },
      prompts: { type: 'string', default: '512' },
      // The job's shape (groups, engines' batch and step, agents' places, tools' time): each
      // workload's own unless given (WORKLOAD_DEFAULTS, agentic-workloads.ts).
      'sched-groups': { type: 'string' },
      'sched-group-size': { type: 'string' },
      'sched-max-running': { type: 'string' },
      'sched-in-flight': { type: 'string' },
      'sched-at-tools': { type: 'string' },
      'sched-rounds': { type: 'string', default: '4' },
      'sched-tool-ms': { type: 'string' },
      'sched-workload': { type: 'string', default: DEFAULT_WORKLOAD },
      'sched-step-ms': { type: 'string' },
      // Off: with progressive priority by remaining time, the engines' preemption cost the gain
      // (128 groups: 1.15-1.24 at SGLang's threshold of 10, 1.31-1.33 off; engine steps +2 ms:
      // 0.91 at 10, 1.10 at 1,000, 1.19 off; docs/performance/agentic.md).
      'sched-preemption-threshold': { type: 'string', default: 'off' },
      'sched-configs': { type: 'string', default: CONFIG_KEYS.join(',') },
    },
  });
  const only = new Set(values.only.split(',').filter(Boolean));
  for (const s of only) if (!(SECTIONS as readonly string[]).includes(s)) throw new Error(`--only: ${s} is not a section (${SECTIONS.join(', ')})`);
  const line = { bench: 'agentic', sections: [...only], ...(only.has('predictor') ? predictorSection(Number(values.steps), Number(values.prompts)) : {}) };
  let sched: SchedResult = {};
  if (only.has('sched')) {
    const workload = workloadOf(values['sched-workload']);
    const d = WORKLOAD_DEFAULTS[workload];
    const a = {
      groups: positiveInt(values['sched-groups'] ?? String(d.groups), '--sched-groups'),
      groupSize: positiveInt(values['sched-group-size'] ?? String(d.groupSize), '--sched-group-size'),
      maxRunning: positiveInt(values['sched-max-running'] ?? String(d.maxRunning), '--sched-max-running'),
      inFlight: positiveInt(values['sched-in-flight'] ?? String(d.inFlight), '--sched-in-flight'),
      atTools: positiveInt(values['sched-at-tools'] ?? String(d.atTools), '--sched-at-tools'),
      configs: configKeys(values['sched-configs']),
      rounds: positiveInt(values['sched-rounds'], '--sched-rounds'),
      // A batch takes 10-60 s on the loaded development machine.
      deadlineS: 150,
      toolMs: nonNegative(values['sched-tool-ms'] ?? String(d.toolMs), '--sched-tool-ms'),
      workload,
      stepMs: nonNegative(values['sched-step-ms'] ?? String(d.stepMs), '--sched-step-ms'),
      preemptionThreshold:
        values['sched-preemption-threshold'] === 'off' ? null : nonNegative(values['sched-preemption-threshold'], '--sched-preemption-threshold'),
    };
    const { result, rows } = await schedSection(a);
    printTable(
      `agentic scheduling, the demo's tool task (${a.workload}): ${a.groups} groups × ${a.groupSize}, 2 reference engines (max running ${a.maxRunning}, ${a.inFlight} in flight and ${a.atTools} more at tools per agent), tool calls of ${a.toolMs} ms, engine steps +${a.stepMs} ms, re-prefill cost ${String(result.sched_reprefill_cost)}; work/capacity ${String(result.sched_work_over_capacity_s)} s (${String(result.sched_engine_tokens_per_s)} tokens/s an engine, ${String(result.sched_owned_tokens_per_s)} its agent's owned trajectories allow), critical path ${String(result.sched_critical_path_s)} s, lower bound ${String(result.sched_makespan_lower_bound_s)} s, before/bound ${String(result.sched_gain_ceiling)}; medians of ${a.rounds} interleaved rounds; sched_throughput_gain ${String(result.sched_throughput_gain)} (goal >= 1.3), round by round ${JSON.stringify(result.sched_throughput_gain_by_round)}`,
      rows,
    );
    sched = result;
  }
  process.stdout.write(`${JSON.stringify({ ...line, ...sched })}
`);
}

function configKeys(text: string): ConfigKey[] {
  const keys = text.split(',').filter(Boolean);
  for (const k of keys)
    if (!(CONFIG_KEYS as readonly string[]).includes(k)) throw new Error(`--sched-configs: ${k} is not a configuration (${CONFIG_KEYS.join(', ')})`);
  if (!keys.includes('before') || !keys.includes('all')) throw new Error('--sched-configs: the gain needs before and all');
  return keys as ConfigKey[];
}

function workloadOf(text: string): SchedWorkload {
  if (!(SCHED_WORKLOADS as readonly string[]).includes(text)) throw new Error(`--sched-workload: ${text} is not a workload (${SCHED_WORKLOADS.join(', ')})`);
  return text as SchedWorkload;
}

function nonNegative(text: string, flag: string): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${flag} needs a number >= 0, got ${text}`);
  return n;
}

/** The predictor against the group-median baseline on the simulator's traces; its JSON fields. */
function predictorSection(steps: number, prompts: number): Record<string, number | string> {
  const scenario = loadScenario(resolveScenarioPath('toolcall-7b'));
  const traces = turnTraces(new Workload(scenario), steps, prompts);
  const predictor = replayPredictions(traces, new LengthPredictor(), 1);
  const baseline = replayPredictions(traces, new GroupMedianBaseline(), 1);
  const row = (name: string, e: PredictionError): string[] => [
    name,
    String(e.predictions),
    String(round(e.tokensMae, 1)),
    String(round(e.turnsMae, 3)),
    String(round(e.afterFirstTurn.tokensMae, 1)),
    String(round(e.afterFirstTurn.turnsMae, 3)),
  ];
  printTable(`remaining-length prediction, toolcall-7b workload, ${steps} steps x ${prompts} groups (step 0 not scored)`, [
    ['predictor', 'predictions', 'tokens MAE', 'turns MAE', 'tokens MAE from 1st call', 'turns MAE from 1st call'],
    row('heddle-style (length-predictor.ts)', predictor),
    row("group's median so far", baseline),
  ]);
  return {
    scenario: 'toolcall-7b',
    steps,
    prompts_per_step: prompts,
    group_size: scenario.workload.groupSize,
    predictions: predictor.predictions,
    predictor_tokens_mae: round(predictor.tokensMae, 1),
    baseline_tokens_mae: round(baseline.tokensMae, 1),
    predictor_mae_over_baseline: round(predictor.tokensMae / baseline.tokensMae, 3),
    predictor_turns_mae: round(predictor.turnsMae, 3),
    baseline_turns_mae: round(baseline.turnsMae, 3),
    predictor_turns_mae_over_baseline: round(predictor.turnsMae / baseline.turnsMae, 3),
    // Predictions made from the first tool call on (the turn-0 ones are both the job's median).
    predictor_mae_over_baseline_after_first_turn: round(predictor.afterFirstTurn.tokensMae / baseline.afterFirstTurn.tokensMae, 3),
    predictor_turns_mae_over_baseline_after_first_turn: round(predictor.afterFirstTurn.turnsMae / baseline.afterFirstTurn.turnsMae, 3),
  };
}
