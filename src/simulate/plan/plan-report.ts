/**
 * `laminar plan`'s output, a function of the plan alone: what was planned for (the job, the fields
 * derived from the flags), the splits as a table an operator reads the trade-off from (throughput
 * against staleness and KV use), the recommendation with the flags that apply it, and the one
 * JSON line of --json. Tables in the simulator's text format (report/tables.ts).
 */
import { formatBytes } from '../../common/units.js';
import { formatNumber, toText, type Table } from '../report/tables.js';
import type { StalenessSummary } from '../metrics/staleness.js';
import { SHORT_STEP_S, trainerStepS } from './choice.js';
import type { PlanScenario } from './plan-scenario.js';
import type { PlanResult, SplitRow } from './plan.js';

const staleness = (s: Pick<StalenessSummary, 'p50' | 'p90' | 'max'>): string => `${s.p50}/${s.p90}/${s.max}`;
const percent = (x: number): string => `${(x * 100).toFixed(0)} %`;
const ratio = (x: number): string => Number(x.toPrecision(3)).toString();
const seconds = (x: number): string => (x >= 10 ? x.toFixed(0) : Number(x.toPrecision(2)).toString());
const machines = (n: number): string => `${n} machine${n === 1 ? '' : 's'}`;
const duration = (s: number): string => (s >= 1 && Number.isInteger(s) ? `${s}s` : `${Math.round(s * 1e3)}ms`);

/** The length distribution's shape: its log-normal spread, or its quantiles' tail. */
function shapeText(out: PlanResult['scenario']['workload']['outputTokens']): string {
  if (out.quantiles === undefined) return `p99/median ${out.p99OverMedian}`;
  const last = out.quantiles.at(-1)!;
  return `${out.quantiles.length} quantiles (p${Number((last.p * 100).toPrecision(4))}/median ${last.ofMedian})`;
}

function header(plan: PlanScenario, result: PlanResult): string {
  const s = result.scenario;
  const out = s.workload.outputTokens;
  const last = out.median.at(-1)!;
  const median = `${formatNumber(out.median[0]!.tokens)} tokens${out.median.length === 1 ? '' : ` (rising to ${formatNumber(last.tokens)} by step ${last.step})`}`;
  const tools = s.workload.toolCalls === null ? '' : `, up to ${s.workload.toolCalls.maxCalls} tool calls each`;
  return (
    `laminar plan: ${s.model.name} on ${result.gpus} GPUs (${result.machines} machines of ${s.hardware.gpusPerMachine} ${s.hardware.gpu.name}), ` +
    `rollouts at TP ${s.rolloutTp.laminar}, from ${plan.base}\n` +
    `workload: batches of ${s.workload.prompts} prompts × ${s.workload.groupSize}, output median ${median}, ${shapeText(out)}, ` +
    `at most ${formatNumber(out.max)}${tools}; relay link ${formatNumber(s.hardware.relayLink.bandwidthGBs * 8)} Gbit/s\n`
  );
}

export function derivedTable(plan: PlanScenario): Table {
  return {
    title: `Changed from ${plan.base}`,
    caption: 'Each field of the plan’s scenario that differs from the shipped one, and the rule that gave it.',
    columns: ['field', 'value', 'how'],
    rows: plan.derived.map((d) => [d.field, d.value, d.how]),
  };
}

/** The last column: the best, a split left out, and those the refinement added. */
function note(row: SplitRow, result: PlanResult): string {
  const notes = [
    row.stage === 'refine' ? 'refined' : '',
    row === result.best ? 'best' : '',
    row.result === null ? 'trainer ceiling below the best: not simulated' : '',
  ];
  return notes.filter((n) => n !== '').join('; ');
}

export function splitsTable(result: PlanResult): Table {
  const simulated = result.rows.filter((r) => r.result !== null).length;
  const refined = result.rows.filter((r) => r.stage === 'refine').length;
  return {
    title:
      `Splits: ${result.steps} steps each, throughput after ${result.warmupSteps} of warm-up; ${simulated} of ${result.rows.length} simulated ` +
      `(a grid of ${result.gridSize}${refined === 0 ? '' : `, ${refined} more around the best`})`,
    caption:
      'One row per whole-machine split, most trainer GPUs first. The trainer ceiling is what its GPUs can train at most (time model), ' +
      'so a split at 100 % of it is trainer-bound and one below it waits for rollouts.',
    columns: [
      'train GPUs',
      'rollout GPUs',
      'rollouts per train GPU',
      'tokens/s',
      'of trainer ceiling',
      'inherent p50/p90/max',
      'consumption p50/p90/max',
      'KV use',
      'trainer step s',
      '',
    ],
    rows: result.rows.map((row) => {
      const p = row.placement;
      const r = row.result;
      const head = [String(p.trainGpus), String(p.rolloutGpus), ratio(row.rolloutsPerTrainGpu)];
      if (r === null) return [...head, `≤ ${formatNumber(row.ceilingTokensPerS)}`, '', '', '', '', '', note(row, result)];
      return [
        ...head,
        formatNumber(r.throughput.tokensPerS),
        percent(r.throughput.tokensPerS / row.ceilingTokensPerS),
        staleness(r.staleness.inherent),
        staleness(r.staleness.consumption),
        r.kvUtilisation.toFixed(3),
        seconds(trainerStepS(r.stepEndsS, result.warmupSteps)),
        note(row, result),
      ];
    }),
  };
}

export function recommendation(result: PlanResult): string {
  const p = result.best.placement;
  const f = result.final;
  const c = result.chunk;
  const perMachine = result.scenario.hardware.gpusPerMachine;
  const shortStep = result.trainerStepS < SHORT_STEP_S;
  const lines: Array<[string, string]> = [
    [
      'split',
      `${p.trainGpus} trainer GPUs (${machines(p.trainGpus / perMachine)}) and ${p.rolloutGpus} rollout GPUs (${machines(p.rolloutMachines)}): ` +
        `${p.rollouts} rollouts of TP ${p.tp}, ${ratio(result.best.rolloutsPerTrainGpu)} per trainer GPU`,
    ],
    ['why', result.reason],
    [
      'chunk size',
      `${formatBytes(c.bytes)} (${c.bytes} bytes): chooseChunkSize for a chain of ${c.relays} ${c.relays === 1 ? 'relay' : 'relays'} on ${formatNumber(c.linkBytesPerS / 1e9)} GB/s links at ` +
        `${formatNumber(c.perChunkS * 1e6)} us per chunk, ${c.chunks} chunks in ${seconds(c.broadcastS)} s (laminar relay --chunk-size ${c.bytes}, or auto on the same link)`,
    ],
    [
      'repack interval',
      `${duration(result.repackIntervalS)}: a trainer step takes ${seconds(result.trainerStepS)} s, ${shortStep ? `under ${SHORT_STEP_S} s, so a tenth of it` : `${SHORT_STEP_S} s or more`} ` +
        `(laminar manager --repack-interval ${duration(result.repackIntervalS)})`,
    ],
    [
      'throughput',
      `${formatNumber(f.throughput.tokensPerS)} tokens/s, ${percent(f.throughput.tokensPerS / result.best.ceilingTokensPerS)} of the trainer's ceiling` +
        (result.confirmed ? ` (the best split run again with that repack interval)` : ''),
    ],
    [
      'staleness',
      `inherent p50/p90/max ${staleness(f.staleness.inherent)}, consumption p50/p90/max ${staleness(f.staleness.consumption)} (versions), KV use ${f.kvUtilisation.toFixed(3)}`,
    ],
  ];
  const width = Math.max(...lines.map(([k]) => k.length));
  return ['Recommendation', ...lines.map(([k, v]) => `${k.padEnd(width)}  ${v}`), ''].join('\n');
}

/** What goes to stdout: the job, the derived fields, the splits, the recommendation. */
export function planText(plan: PlanScenario, result: PlanResult): string {
  const derived = plan.derived.length === 0 ? `Changed from ${plan.base}: nothing but the splits\n` : toText(derivedTable(plan), 200);
  return [header(plan, result), derived, toText(splitsTable(result)), recommendation(result)].join('\n');
}

/** The one JSON line of --json. */
export function planJson(plan: PlanScenario, result: PlanResult): Record<string, unknown> {
  const round = (x: number, d = 3): number => Number(x.toFixed(d));
  const stale = (s: StalenessSummary) => ({ p50: s.p50, p90: s.p90, max: s.max });
  const p = result.best.placement;
  return {
    plan: result.scenario.name,
    base: plan.base,
    model: { name: result.scenario.model.name, params: result.scenario.model.params },
    gpus: result.gpus,
    machines: result.machines,
    tp: result.scenario.rolloutTp.laminar,
    steps: result.steps,
    warmup_steps: result.warmupSteps,
    derived: plan.derived,
    splits: result.rows.map((row) => ({
      train_gpus: row.placement.trainGpus,
      rollout_gpus: row.placement.rolloutGpus,
      rollouts: row.placement.rollouts,
      rollouts_per_train_gpu: round(row.rolloutsPerTrainGpu),
      ceiling_tokens_per_s: round(row.ceilingTokensPerS, 1),
      simulated: row.result !== null,
      ...(row.result === null
        ? {}
        : {
            tokens_per_s: round(row.result.throughput.tokensPerS, 1),
            inherent: stale(row.result.staleness.inherent),
            consumption: stale(row.result.staleness.consumption),
            kv_utilisation: round(row.result.kvUtilisation, 4),
            trainer_step_s: round(trainerStepS(row.result.stepEndsS, result.warmupSteps)),
            events: row.result.events,
            wall_s: round(row.result.wallMs / 1e3),
          }),
    })),
    best: {
      train_gpus: p.trainGpus,
      rollout_gpus: p.rolloutGpus,
      rollouts: p.rollouts,
      rollouts_per_train_gpu: round(result.best.rolloutsPerTrainGpu),
      tokens_per_s: round(result.final.throughput.tokensPerS, 1),
      reason: result.reason,
    },
    chunk: { relays: result.chunk.relays, bytes: result.chunk.bytes, chunks: result.chunk.chunks, broadcast_s: round(result.chunk.broadcastS, 4) },
    trainer_step_s: round(result.trainerStepS),
    repack_interval_s: result.repackIntervalS,
    confirmed: result.confirmed,
    staleness: { inherent: stale(result.final.staleness.inherent), consumption: stale(result.final.staleness.consumption) },
    kv_utilisation: round(result.final.kvUtilisation, 4),
    events: result.events,
    wall_s: round(result.wallS),
  };
}
