/**
 * `laminar plan`: the operators' sizing command (issue #27, docs/components/simulator.md, "Sizing
 * a job"). The command's flags; its work is plan-action.ts, imported when the command runs.
 */
import { Command } from 'commander';
import type { PlanFlags } from '../simulate/plan/request.js';
import { DEFAULT_SPLITS, DEFAULT_STEPS } from '../simulate/plan/request.js';

export function planCommand(): Command {
  return new Command('plan')
    .description(
      'size a laminar job: simulate whole-machine trainer/rollout splits of the cluster with the cluster simulator and print the best split ' +
        '(rollouts per trainer GPU), its broadcast chunk size, its repack interval and the staleness to expect',
    )
    .requiredOption('--model <size>', 'the model: 7B, 32B or 72B (the shipped scenarios), or a parameter count such as 14B or 14e9 (scaled from the nearest)')
    .requiredOption('--gpus <n>', 'GPUs in the job, a multiple of a machine (8), at least two machines')
    .option('--link-gbit <G>', "the relay link and the trainer's push, Gbit/s (default: the scenario's, 800)")
    .option('--median-tokens <M>', "median response length, tokens, flat over training (default: the scenario's, 3,500 rising to 4,500 by step 100)")
    .option('--p99-ratio <R>', "p99 / median of the response length (default: the scenario's, 10)")
    .option('--max-tokens <X>', "longest response, tokens (default: the scenario's, 16,384)")
    .option('--tool-calls', "the multi-turn tool-call task (toolcall-7b's tool calls) instead of single-turn math")
    .option('--steps <n>', 'training steps simulated per split, at least 2; half are warm-up', String(DEFAULT_STEPS))
    .option(
      '--splits <n>',
      'trainer sizes of the coarse grid, spread from one machine to all but one; the plan then refines around the best to whole machines',
      String(DEFAULT_SPLITS),
    )
    .option(
      '--set <path=value>',
      'change one field of the base scenario before the flags above, e.g. trainer.mfu=0.25 (the value is JSON, or else text); repeatable',
      (text: string, previous: string[] | undefined) => [...(previous ?? []), text],
    )
    .option('--json', 'print one JSON line last (every split, the recommendation)')
    .action(async (opts: PlanFlags) => {
      const { planAction } = await import('./plan-action.js');
      planAction(opts);
    });
}
