/**
 * `laminar simulate <scenario...>`: the cluster simulator (issue #27, docs/components/simulator.md).
 * The command's flags; its work is simulate-action.ts, imported when the command runs.
 */
import { Command } from 'commander';
import { shippedScenarios } from '../simulate/files.js';
import { MECHANISMS } from '../simulate/mechanisms.js';
import type { SimulateFlags } from './simulate-action.js';

export function simulateCommand(): Command {
  return new Command('simulate')
    .description(
      `simulate an RL post-training job at cluster scale in virtual time (laminar, laminar-no-repack, one-step, stream, sync, areal), ` +
        `with the paper comparison; a scenario is a JSON file or a shipped name (${shippedScenarios().join(', ')})`,
    )
    .argument('<scenario...>', 'scenario file(s), or names of src/simulate/scenarios/')
    .option('--system <list>', 'systems to run, comma-separated (default: the scenario\'s "systems")')
    .option('--gpus <list>', 'placement rows to run by cluster size, comma-separated (default: every row)')
    .option('--steps <n>', "training steps per run (default: the scenario's run.steps)")
    .option('--warmup <n>', "warm-up steps left out of the throughput (default: the scenario's, at most steps - 1)")
    .option('--out <dir>', 'where to write results.json, tables.md and the SVG charts (default: sim-out/<scenario>)')
    .option('--json', 'print one JSON line last (the runs, the comparison, the files written)')
    .option(
      '--set <path=value>',
      'change one field of every scenario for this run, e.g. trainer.mfu=0.25 or workload.outputTokens.p99OverMedian=5 (the value is JSON, or else text); repeatable',
      (text: string, previous: string[] | undefined) => [...(previous ?? []), text],
    )
    .option('--without <list>', `mechanisms to switch off, comma-separated, to see what each closes (${MECHANISMS.join(', ')}; default: none)`)
    .action(async (args: string[], opts: SimulateFlags) => {
      const { simulateAction } = await import('./simulate-action.js');
      await simulateAction(args, opts);
    });
}
