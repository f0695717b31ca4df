/**
 * What `laminar plan` does (plan.ts declares the command and loads this module only when the
 * command runs, so the other subcommands do not load the simulator): checks the flags, builds the
 * plan's scenario, simulates the splits with a line per split on stderr, and prints the plan on
 * stdout, with one JSON line last under --json.
 */
import { formatNumber } from '../simulate/report/tables.js';
import { planJob, type PlanProgress } from '../simulate/plan/plan.js';
import { planJson, planText } from '../simulate/plan/plan-report.js';
import { planScenario } from '../simulate/plan/plan-scenario.js';
import { parsePlanFlags, type PlanFlags } from '../simulate/plan/request.js';
import type { ScenarioRunResult } from '../simulate/systems/run-context.js';

function progressLine(e: PlanProgress): string {
  const p = e.row.placement;
  const split = `${p.trainGpus} train + ${p.rolloutGpus} rollout GPUs`;
  if (e.kind === 'confirmed') return `again with a repack interval of ${e.repackIntervalS} s, ${split}: ${outcome(e.result)}\n`;
  const at = e.stage === 'grid' ? `[${e.index + 1}/${e.total}]` : `[refine ${e.index + 1}]`;
  if (e.kind === 'skipped')
    return `${at} ${split}: not simulated, its trainer trains at most ${formatNumber(e.row.ceilingTokensPerS)} tokens/s, below the best ${formatNumber(e.bestTokensPerS)}\n`;
  return `${at} ${split}: ${outcome(e.row.result!)}\n`;
}

function outcome(r: ScenarioRunResult): string {
  return `${formatNumber(r.events)} events in ${(r.wallMs / 1e3).toFixed(2)} s, ${formatNumber(r.throughput.tokensPerS)} tokens/s, inherent staleness max ${r.staleness.inherent.max}`;
}

export function planAction(flags: PlanFlags): void {
  const request = parsePlanFlags(flags);
  const plan = planScenario(request);
  const s = plan.scenario;
  process.stderr.write(
    `laminar plan: ${s.model.name} on ${request.gpus} GPUs from ${plan.base}; laminar, ${request.steps} steps per split, a grid of at most ${request.splits} splits refined around the best\n`,
  );
  const result = planJob(s, { steps: request.steps, splits: request.splits, progress: (e) => process.stderr.write(progressLine(e)) });
  process.stderr.write(`simulated ${formatNumber(result.events)} events in ${result.wallS.toFixed(1)} s\n`);
  process.stdout.write(planText(plan, result));
  if (flags.json) process.stdout.write(`${JSON.stringify(planJson(plan, result))}\n`);
}
