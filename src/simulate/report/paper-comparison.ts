/**
 * The paper comparison (docs/design/simulator.md, "Reproducing the paper"): each figure of
 * src/simulate/paper-figures.json whose role is 'validate', the simulated value computed from the
 * runs at hand, sim/paper, and whether it is within the figure's tolerance (or its bound). Where
 * it is not, or where these runs cannot give it, `why` says why (known-deviations.ts); nothing
 * here is tuned to the paper.
 */
import type { SystemName } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { failureEffect } from './failure-effect.js';
import { whyNotWithin } from './known-deviations.js';
import { paperFigure, type PaperModel } from './paper.js';
import type { ScenarioSummary } from './results.js';

export interface ComparisonRow {
  /** The figure's id in paper-figures.json, with a suffix where one figure gives several values. */
  id: string;
  what: string;
  /** Where the paper gives it (`§8.1, Figure 11`). */
  source: string;
  paper: number;
  /** null when these runs cannot give it (see `why`). */
  simulated: number | null;
  /** simulated / paper. */
  ratio: number | null;
  /** 'tolerance': |sim/paper − 1| ≤ tolerance; 'bound': the simulated value satisfies `bound`. */
  check: 'tolerance' | 'bound';
  tolerance: number | null;
  bound: string | null;
  within: boolean | null;
  /** What the simulated value is computed over. */
  basis: string;
  /** Why the simulated value is outside the tolerance or missing; null when within. */
  why: string | null;
}

/** The paper's baselines of Figure 11 by the simulator's system names. */
export const FIG11_BASELINES: ReadonlyArray<{ key: string; system: SystemName; label: string }> = [
  { key: 'verl', system: 'sync', label: 'sync (verl)' },
  { key: 'one_step', system: 'one-step', label: 'one-step' },
  { key: 'stream', system: 'stream', label: 'stream' },
];

/** Runs by (scenario, GPUs) and then by system, in the order they first appear. */
export function runsByPoint(runs: readonly ScenarioRunResult[]): Map<string, Map<SystemName, ScenarioRunResult>> {
  const points = new Map<string, Map<SystemName, ScenarioRunResult>>();
  for (const r of runs) {
    const key = `${r.scenario}@${r.gpus}`;
    let bySystem = points.get(key);
    if (bySystem === undefined) points.set(key, (bySystem = new Map<SystemName, ScenarioRunResult>()));
    bySystem.set(r.system, r);
  }
  return points;
}

interface Context {
  summaries: readonly ScenarioSummary[];
  runs: readonly ScenarioRunResult[];
  /** Math-task runs of the paper's models (Figure 11's setting). */
  mathRuns: ScenarioRunResult[];
  modelOf: Map<string, PaperModel | null>;
}

function sourceOf(id: string): string {
  const s = paperFigure(id).source;
  return [s.section, s.figure, s.table].filter((x) => x !== undefined).join(', ');
}

function row(
  id: string,
  figureId: string,
  paper: number,
  simulated: number | null,
  check: { tolerance: number } | { bound: string; holds: (sim: number) => boolean },
  basis: string,
  what = paperFigure(figureId).what,
): ComparisonRow {
  const ratio = simulated === null || paper === 0 ? null : simulated / paper;
  let within: boolean | null = null;
  if (simulated !== null) within = 'tolerance' in check ? Math.abs(ratio! - 1) <= check.tolerance + 1e-12 : check.holds(simulated);
  const base = {
    id,
    what,
    source: sourceOf(figureId),
    paper,
    simulated,
    ratio,
    check: 'tolerance' in check ? ('tolerance' as const) : ('bound' as const),
    tolerance: 'tolerance' in check ? check.tolerance : null,
    bound: 'bound' in check ? check.bound : null,
    within,
    basis,
  };
  return { ...base, why: within === true ? null : whyNotWithin(id, simulated === null) };
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Laminar's speedup over `baseline` at every (math scenario, GPUs) point where both ran (or of `runs`). */
function speedups(ctx: Context, baseline: SystemName, runs: readonly ScenarioRunResult[] = ctx.mathRuns): number[] {
  const out: number[] = [];
  for (const bySystem of runsByPoint(runs).values()) {
    const l = bySystem.get('laminar');
    const b = bySystem.get(baseline);
    if (l && b && b.throughput.tokensPerS > 0) out.push(l.throughput.tokensPerS / b.throughput.tokensPerS);
  }
  return out;
}

/** Strong-scaling efficiency of `system` per math scenario (or scenario of `runs`) with two sizes or more: (thr at largest / at smallest) / (GPU ratio). */
function scalingEfficiencies(ctx: Context, system: SystemName, runs: readonly ScenarioRunResult[] = ctx.mathRuns): number[] {
  const out: number[] = [];
  for (const s of ctx.summaries) {
    const rs = runs.filter((r) => r.scenario === s.name && r.system === system).sort((a, b) => a.gpus - b.gpus);
    if (rs.length < 2) continue;
    const small = rs[0]!;
    const large = rs[rs.length - 1]!;
    if (small.throughput.tokensPerS > 0) out.push(large.throughput.tokensPerS / small.throughput.tokensPerS / (large.gpus / small.gpus));
  }
  return out;
}

function runOf(ctx: Context, model: PaperModel, gpus: number, system: SystemName): ScenarioRunResult | undefined {
  return ctx.runs.find((r) => ctx.modelOf.get(r.scenario) === model && r.gpus === gpus && r.system === system);
}

export function compareWithPaper(summaries: readonly ScenarioSummary[], runs: readonly ScenarioRunResult[]): ComparisonRow[] {
  const modelOf = new Map(summaries.map((s) => [s.name, s.paperModel]));
  const math = new Set(summaries.filter((s) => s.task === 'math' && s.paperModel !== null).map((s) => s.name));
  const ctx: Context = { summaries, runs, mathRuns: runs.filter((r) => math.has(r.scenario)), modelOf };
  const rows: ComparisonRow[] = [];
  const num = (id: string): number => paperFigure(id).value as number;
  const tol = (id: string): number => paperFigure(id).tolerance ?? 0;

  // Figure 11: laminar over each baseline, mean and largest over the (model, GPUs) points.
  for (const b of FIG11_BASELINES) {
    const xs = speedups(ctx, b.system);
    const basis = `${xs.length} of 15 (model, GPUs) points`;
    const avgId = `fig11.avg_speedup.${b.key}`;
    const maxId = `fig11.max_speedup.${b.key}`;
    rows.push(row(avgId, avgId, num(avgId), xs.length ? mean(xs) : null, { tolerance: tol(avgId) }, basis));
    rows.push(row(maxId, maxId, num(maxId), xs.length ? Math.max(...xs) : null, { tolerance: tol(maxId) }, basis));
  }
  const lam = scalingEfficiencies(ctx, 'laminar');
  const effId = 'fig11.scaling_efficiency.laminar';
  rows.push(
    row(effId, effId, num(effId), lam.length ? mean(lam) : null, { tolerance: tol(effId) }, `mean over ${lam.length} model(s), smallest → largest scale`),
  );
  const bestId = 'fig11.scaling_efficiency.best_baseline';
  const best = FIG11_BASELINES.map((b) => scalingEfficiencies(ctx, b.system))
    .filter((xs) => xs.length > 0)
    .map(mean);
  const bestBound = num(bestId) * 1.15;
  rows.push(
    row(
      bestId,
      bestId,
      num(bestId),
      best.length ? Math.max(...best) : null,
      { bound: `≤ ${bestBound.toFixed(3)} (paper × 1.15)`, holds: (x) => x <= bestBound },
      'the best of sync, one-step and stream, each a mean over models',
    ),
  );

  // Staleness (§8.1, Figure 10).
  const laminarMath = ctx.mathRuns.filter((r) => r.system === 'laminar');
  const maxId = 'sec8_1.max_inherent_staleness';
  rows.push(
    row(
      maxId,
      maxId,
      num(maxId),
      laminarMath.length ? Math.max(...laminarMath.map((r) => r.staleness.inherent.max)) : null,
      { bound: `≤ ${num(maxId)}`, holds: (x) => x <= num(maxId) },
      `max over ${laminarMath.length} laminar run(s)`,
    ),
  );
  const fig10 = runOf(ctx, '7B', 64, 'laminar');
  const fig10Id = 'fig10.inherent_staleness_typical';
  const p90s = fig10 ? fig10.staleness.inherentByVersion.filter((v) => v.count > 0).map((v) => v.p90) : [];
  rows.push(
    row(
      fig10Id,
      fig10Id,
      num(fig10Id),
      p90s.length ? Math.max(...p90s) : null,
      { bound: `p90 < ${num(fig10Id)}`, holds: (x) => x < num(fig10Id) },
      'laminar, 7B on 64 GPUs: the largest p90 over finish-time ranges',
    ),
  );

  // Table 1 / §8.4 / Figure 15: repack on 32B, 128 GPUs.
  const withR = runOf(ctx, '32B', 128, 'laminar');
  const without = runOf(ctx, '32B', 128, 'laminar-no-repack');
  const kv = paperFigure('tab1.kv_util').value as { withRepack: number; withoutRepack: number };
  const basis32 = '32B on 128 GPUs, laminar and laminar-no-repack';
  rows.push(
    row(
      'tab1.kv_util.with_repack',
      'tab1.kv_util',
      kv.withRepack,
      withR?.kvUtilisation ?? null,
      { tolerance: tol('tab1.kv_util') },
      basis32,
      'Mean KV utilisation with repack',
    ),
  );
  rows.push(
    row(
      'tab1.kv_util.without_repack',
      'tab1.kv_util',
      kv.withoutRepack,
      without?.kvUtilisation ?? null,
      { tolerance: tol('tab1.kv_util') },
      basis32,
      'Mean KV utilisation without repack',
    ),
  );
  const both = withR && without && without.kvUtilisation > 0 && without.generationTokensPerS > 0;
  rows.push(
    row(
      'sec8_4.kv_util_gain',
      'sec8_4.kv_util_gain',
      1 + num('sec8_4.kv_util_gain'),
      both ? withR.kvUtilisation / without.kvUtilisation : null,
      { tolerance: tol('sec8_4.kv_util_gain') },
      basis32,
      'Mean KV utilisation, with repack ÷ without',
    ),
  );
  rows.push(
    row(
      'fig15.gen_throughput_gain',
      'fig15.gen_throughput_gain',
      1 + num('fig15.gen_throughput_gain'),
      both ? withR.generationTokensPerS / without.generationTokensPerS : null,
      { tolerance: tol('fig15.gen_throughput_gain') },
      basis32,
      'Generation throughput, with repack ÷ without',
    ),
  );

  // Analytic: the relays' chunk model (§4.2) and the trainer's push (§8.3), per scenario's model.
  const s72 = summaries.find((s) => s.paperModel === '72B');
  const bcId = 'sec4_2.broadcast_72b_127';
  const bcBound = num(bcId) * (1 + tol(bcId));
  rows.push(
    row(
      bcId,
      bcId,
      num(bcId),
      s72 ? s72.broadcast128.seconds : null,
      { bound: `< ${bcBound.toFixed(2)} s (paper × 1.15)`, holds: (x) => x < bcBound },
      s72 ? `chunk model, ${s72.name}'s link, ${(s72.broadcast128.chunkBytes / 2 ** 20).toFixed(0)} MiB chunks, p = 128` : 'a 72B scenario',
    ),
  );
  const stall = paperFigure('sec8_3.actor_stall').value as Record<string, number>;
  for (const model of ['32B', '72B'] as const) {
    const s = summaries.find((x) => x.paperModel === model);
    rows.push(
      row(
        `sec8_3.actor_stall.${model}`,
        'sec8_3.actor_stall',
        stall[model]!,
        s ? s.actorStallS : null,
        { tolerance: tol('sec8_3.actor_stall') },
        s ? `weight bytes / ${s.name}'s trainer-to-master bandwidth` : `a ${model} scenario`,
        `Actor stall per publication, ${model}`,
      ),
    );
  }

  // §4.3: the chain's repairs, from the relays' chain (RelayChain ordered by arrangeChain): the
  // 72B study's chain of 128 relays, and every repair of the runs with failures.
  const repairBound = num('sec4_3.chain_repair') * (1 + tol('sec4_3.chain_repair'));
  const runRepairs = runs.flatMap((r) => r.chainRepairs);
  const relayRepairs = [...(s72 ? [s72.broadcast.relayRepair.repairS] : []), ...runRepairs.filter((x) => !x.wasMaster).map((x) => x.repairS)];
  const splices = s72 ? s72.broadcast.relayRepair.splice : true;
  rows.push(
    row(
      'sec4_3.chain_repair',
      'sec4_3.chain_repair',
      num('sec4_3.chain_repair'),
      relayRepairs.length ? Math.max(...relayRepairs) : null,
      { bound: `< ${repairBound.toFixed(2)} s (paper × 1.15), a splice`, holds: (x) => x < repairBound && splices },
      `${s72 ? `${s72.name}: 128 relays, hop 64 dies mid-broadcast` : 'no 72B scenario'}${runRepairs.length ? `; ${runRepairs.length} repair(s) in runs with failures` : ''}; the scenario's detection + publication delays`,
    ),
  );
  const masterRepairs = [...(s72 ? [s72.broadcast.masterRepair.repairS] : []), ...runRepairs.filter((x) => x.wasMaster).map((x) => x.repairS)];
  const masterBound = num('sec4_3.master_reelection') * (1 + tol('sec4_3.master_reelection'));
  rows.push(
    row(
      'sec4_3.master_reelection',
      'sec4_3.master_reelection',
      num('sec4_3.master_reelection'),
      masterRepairs.length ? Math.max(...masterRepairs) : null,
      { bound: `< ${masterBound.toFixed(2)} s (paper × 1.15)`, holds: (x) => x < masterBound },
      s72 ? `${s72.name}: the master of 128 relays dies mid-broadcast; new master ${s72.broadcast.masterRepair.masterAfter} (arrangeChain)` : 'no 72B scenario',
    ),
  );

  // Figure 12: the tool-call task's scenarios (7B rows).
  const toolNames = new Set(summaries.filter((x) => x.task === 'tool-call').map((x) => x.name));
  const toolRuns = runs.filter((r) => toolNames.has(r.scenario));
  const toolSpeedups = FIG11_BASELINES.flatMap((b) => speedups(ctx, b.system, toolRuns));
  const range = paperFigure('fig12.speedup_range.tool_call_7b').value as [number, number];
  const tolRange = tol('fig12.speedup_range.tool_call_7b');
  const toolBasis = `${toolSpeedups.length} (baseline, GPUs) point(s) of the tool-call scenario(s)`;
  rows.push(
    row(
      'fig12.speedup_range.tool_call_7b.min',
      'fig12.speedup_range.tool_call_7b',
      range[0],
      toolSpeedups.length ? Math.min(...toolSpeedups) : null,
      { bound: `≥ ${(range[0] / (1 + tolRange)).toFixed(2)} (paper ÷ 1.15)`, holds: (x) => x >= range[0] / (1 + tolRange) },
      toolBasis,
      "Figure 12: laminar's smallest speedup over sync, one-step and stream (tool call, 7B)",
    ),
  );
  rows.push(
    row(
      'fig12.speedup_range.tool_call_7b.max',
      'fig12.speedup_range.tool_call_7b',
      range[1],
      toolSpeedups.length ? Math.max(...toolSpeedups) : null,
      { bound: `≤ ${(range[1] * (1 + tolRange)).toFixed(2)} (paper × 1.15)`, holds: (x) => x <= range[1] * (1 + tolRange) },
      toolBasis,
      "Figure 12: laminar's largest speedup over sync, one-step and stream (tool call, 7B)",
    ),
  );
  const toolEff = scalingEfficiencies(ctx, 'laminar', toolRuns);
  rows.push(
    row(
      'fig12.scaling_efficiency',
      'fig12.scaling_efficiency',
      num('fig12.scaling_efficiency'),
      toolEff.length ? mean(toolEff) : null,
      { tolerance: tol('fig12.scaling_efficiency') },
      'laminar on the tool-call scenario(s), smallest → largest scale run',
      "Figure 12: laminar's strong-scaling efficiency on the tool-call task",
    ),
  );

  // §8.5 / Figure 16: a machine failure in a run (failure-32b-128).
  const effects = runs.map(failureEffect).filter((e) => e !== null);
  const effect = effects.find((e) => modelOf.get(e.scenario) === '32B' && e.gpus === 128) ?? effects[0];
  const effectBasis = effect
    ? `${effect.scenario} on ${effect.gpus} GPUs: ${effect.rolloutsLost} of ${effect.rolloutsBefore} rollouts lost at ${effect.atS.toFixed(0)} s, replaced at ${effect.backAtS === null ? 'never' : `${effect.backAtS.toFixed(0)} s`}`
    : 'a run with a machine failure (failure-32b-128)';
  const drop = effect && effect.generationBefore > 0 ? effect.generationDuring / effect.generationBefore : null;
  rows.push(
    row('sec8_5.generation_drop', 'sec8_5.generation_drop', num('sec8_5.generation_drop'), drop, { tolerance: tol('sec8_5.generation_drop') }, effectBasis),
  );
  if (drop !== null && drop >= 1) rows[rows.length - 1] = { ...rows[rows.length - 1]!, within: false, why: whyNotWithin('sec8_5.generation_drop', false) };
  const trainRatio =
    effect && effect.stepsPerHourDuring !== null && effect.stepsPerHourBefore > 0 ? effect.stepsPerHourDuring / effect.stepsPerHourBefore : null;
  rows.push(
    row(
      'sec8_5.training_unaffected',
      'sec8_5.training_unaffected',
      num('sec8_5.training_unaffected'),
      trainRatio,
      { bound: '≥ 0.85 (unaffected or a slight drop)', holds: (x) => x >= 0.85 },
      `${effectBasis}; training steps per hour`,
    ),
  );
  const recovered = effect && effect.generationAfter !== null && effect.generationBefore > 0 ? effect.generationAfter / effect.generationBefore : null;
  rows.push(
    row(
      'sec8_5.generation_recovered',
      'sec8_5.generation_recovered',
      num('sec8_5.generation_recovered'),
      recovered,
      { tolerance: tol('sec8_5.generation_recovered') },
      effectBasis,
    ),
  );
  return rows;
}
