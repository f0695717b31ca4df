/**
 * `npm run bench -- agentic [--steps 3] [--prompts 512]`
 *
 * Issue #49's agentic scheduling figures. So far: `predictor_mae_over_baseline`, the mean
 * absolute error of the remaining-length predictor (src/manager/agentic/length-predictor.ts) over
 * that of the group's-median-so-far baseline, both replayed over the same turn-by-turn traces of
 * the simulator's tool-call task (toolcall-7b's workload, src/simulate/workload/turn-traces.ts).
 * The first step trains both and is not scored. Prints a table, then one JSON line (the last line
 * of stdout).
 */
import { parseArgs } from 'node:util';
import { GroupMedianBaseline } from '../src/manager/agentic/group-median-baseline.js';
import { LengthPredictor } from '../src/manager/agentic/length-predictor.js';
import { replayPredictions, type PredictionError } from '../src/manager/agentic/prediction-replay.js';
import { resolveScenarioPath } from '../src/simulate/files.js';
import { loadScenario } from '../src/simulate/scenario/load.js';
import { turnTraces } from '../src/simulate/workload/turn-traces.js';
import { Workload } from '../src/simulate/workload/workload.js';
import { printTable, round } from './support.js';

export function run(args: string[]): Promise<void> {
  const { values } = parseArgs({ args, options: { steps: { type: 'string', default: '3' }, prompts: { type: 'string', default: '512' } } });
  const steps = Number(values.steps);
  const prompts = Number(values.prompts);
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
  const line = {
    bench: 'agentic',
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
  process.stdout.write(`${JSON.stringify(line)}\n`);
  return Promise.resolve();
}
