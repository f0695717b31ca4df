/**
 * The paper comparison (docs/design/simulator.md, "Reproducing the paper"): each figure of
 * src/simulate/paper-figures.json whose role is 'validate', the simulated value computed from the
 * runs at hand, sim/paper, and whether it is within the figure's tolerance (or its bound). Where
 * it is not, or where these runs cannot give it, `why` says why (known-deviations.ts); nothing
 * here is tuned to the paper.
 *
 * FIGURES is the comparison, one spec per row: which figure, the paper's value, how the
 * simulated value comes from the runs' facts (comparison-facts.ts), the check and the basis.
 */
import type { ScenarioRunResult } from '../systems/run-context.js';
import { comparisonFacts, FIG11_BASELINES, mean, SMALL_SCALE_GPUS, type ComparisonFacts } from './comparison-facts.js';
import { whyNotWithin } from './known-deviations.js';
import { paperFigure } from './paper.js';
import type { ScenarioSummary } from './scenario-summary.js';

export { FIG11_BASELINES, runsByPoint } from './comparison-facts.js';

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

/** A bound the simulated value must satisfy instead of the figure's tolerance. */
interface Bound {
  text: string;
  holds: (simulated: number) => boolean;
}

/** One row of the comparison. */
interface FigureSpec {
  /** The row's id: the figure's, with a suffix where one figure gives several rows. */
  id: string;
  /** The figure in paper-figures.json (default: id). */
  figure?: string;
  /** What the row shows (default: the figure's `what`). */
  what?: string;
  /** The paper's value (default: the figure's value, a number). */
  paper?: () => number;
  simulated: (f: ComparisonFacts) => number | null;
  /** Default: within the figure's tolerance. */
  bound?: (f: ComparisonFacts) => Bound;
  /** With the tolerance: what the simulated value must satisfy besides. */
  alsoHolds?: (simulated: number) => boolean;
  basis: (f: ComparisonFacts) => string;
}

const num = (id: string): number => paperFigure(id).value as number;
const tol = (id: string): number => paperFigure(id).tolerance ?? 0;
const maxOf = (xs: number[]): number | null => (xs.length ? Math.max(...xs) : null);
const minOf = (xs: number[]): number | null => (xs.length ? Math.min(...xs) : null);
const meanOf = (xs: number[]): number | null => (xs.length ? mean(xs) : null);

/** The paper's value of a figure that gives one per key (`{ withRepack, withoutRepack }`, per model). */
const part = (figure: string, key: string) => (): number => (paperFigure(figure).value as Record<string, number>)[key]!;
/** The paper's other value of a figure (`maxValue`, `baselineValue`). */
const other = (figure: string, key: 'maxValue' | 'baselineValue') => (): number => paperFigure(figure)[key]!;
/** The paper's value of a range figure: its low (0) or high (1) end. */
const end = (figure: string, i: 0 | 1) => (): number => (paperFigure(figure).value as [number, number])[i];
/** The bound `paper × (1 + tolerance)`, as `< x.xx s (paper × 1.15)`. */
const belowScaled = (id: string, suffix = ''): Bound => {
  const bound = num(id) * (1 + tol(id));
  return { text: `< ${bound.toFixed(2)} s (paper × 1.15)${suffix}`, holds: (x) => x < bound };
};

const repack32Basis = (): string => '32B on 128 GPUs, laminar and laminar-no-repack';
const fig12 = 'fig12.speedup_range.tool_call_7b';
const fig12Basis = (f: ComparisonFacts): string => `${f.toolSpeedups.length} (baseline, GPUs) point(s) of the tool-call scenario(s)`;

export const FIGURES: readonly FigureSpec[] = [
  // Figure 11: laminar over each baseline, mean and largest over the (model, GPUs) points.
  ...FIG11_BASELINES.flatMap((b): FigureSpec[] => {
    const basis = (f: ComparisonFacts): string => `${f.fig11Speedups.get(b.key)!.length} of 15 (model, GPUs) points`;
    return [
      { id: `fig11.avg_speedup.${b.key}`, simulated: (f) => meanOf(f.fig11Speedups.get(b.key)!), basis },
      { id: `fig11.max_speedup.${b.key}`, simulated: (f) => maxOf(f.fig11Speedups.get(b.key)!), basis },
    ];
  }),
  {
    id: 'fig11.avg_speedup.largest_scale_all_baselines',
    simulated: (f) => meanOf(f.largestScaleSpeedups),
    basis: (f) => `${f.largestScaleSpeedups.length} (baseline, model) pairs at each model's largest cluster`,
  },
  {
    id: 'fig11.avg_speedup.small_scale_all_baselines',
    simulated: (f) => meanOf(f.smallScaleSpeedups),
    basis: (f) => `${f.smallScaleSpeedups.length} (baseline, model, GPUs) points on at most ${SMALL_SCALE_GPUS} GPUs`,
  },
  {
    id: 'fig11.scaling_efficiency.laminar',
    simulated: (f) => meanOf(f.laminarEfficiency),
    basis: (f) => `mean over ${f.laminarEfficiency.length} model(s), smallest → largest scale`,
  },
  {
    id: 'fig11.scaling_efficiency.laminar.max',
    figure: 'fig11.scaling_efficiency.laminar',
    what: "Laminar's strong-scaling efficiency on math, the largest over the models (32B in the paper)",
    paper: other('fig11.scaling_efficiency.laminar', 'maxValue'),
    simulated: (f) => maxOf(f.laminarEfficiency),
    basis: (f) => `the largest of ${f.laminarEfficiency.length} model(s)`,
  },
  {
    id: 'fig11.scaling_efficiency.best_baseline',
    simulated: (f) => maxOf(f.baselineEfficiency),
    basis: (f) => `the best of ${f.baselineEfficiency.length} baseline(s) (sync, one-step, stream, areal), each a mean over models`,
  },
  {
    id: 'fig11.scaling_efficiency.best_baseline.max',
    figure: 'fig11.scaling_efficiency.best_baseline',
    what: "The best baseline's strong-scaling efficiency on math, its largest over the models",
    paper: other('fig11.scaling_efficiency.best_baseline', 'maxValue'),
    simulated: (f) => maxOf(f.bestBaselineEfficiencies),
    basis: (f) => `the best baseline by mean, the largest of its ${f.bestBaselineEfficiencies.length} model(s)`,
  },

  // §2.3: the GPU time the baselines' barrier leaves completely idle at the largest clusters ("up to": the largest over the models).
  ...(
    [
      ['sync', 'sync', 'synchronous (verl)'],
      ['one_step', 'one-step', 'one-step staleness'],
    ] as const
  ).map(([key, system, label]): FigureSpec => ({
    id: `sec2.idle_fraction.largest_scale.${key}`,
    figure: 'sec2.idle_fraction.largest_scale',
    what: `Share of GPU time completely idle at the largest cluster, ${label}`,
    paper: part('sec2.idle_fraction.largest_scale', key === 'sync' ? 'sync' : 'oneStep'),
    simulated: (f) => maxOf(f.largestScaleIdle.get(system)!),
    basis: (f) => `${system}: the largest of ${f.largestScaleIdle.get(system)!.length} math scenario(s) at their largest cluster, over the whole run`,
  })),

  // Staleness (§8.1, Figure 10).
  {
    id: 'sec8_1.max_inherent_staleness',
    simulated: (f) => maxOf(f.laminarMath.map((r) => r.staleness.inherent.max)),
    bound: () => ({ text: `≤ ${num('sec8_1.max_inherent_staleness')}`, holds: (x) => x <= num('sec8_1.max_inherent_staleness') }),
    basis: (f) => `max over ${f.laminarMath.length} laminar run(s)`,
  },
  {
    id: 'fig10.inherent_staleness_typical',
    simulated: (f) => maxOf(f.fig10P90s),
    bound: () => ({ text: `p90 < ${num('fig10.inherent_staleness_typical')}`, holds: (x) => x < num('fig10.inherent_staleness_typical') }),
    basis: () => 'laminar, 7B on 64 GPUs: the largest p90 over finish-time ranges',
  },

  // Table 1 / §8.4 / Figure 15: repack on 32B, 128 GPUs.
  {
    id: 'tab1.kv_util.with_repack',
    figure: 'tab1.kv_util',
    what: 'Mean KV utilisation with repack',
    paper: part('tab1.kv_util', 'withRepack'),
    simulated: (f) => f.withRepack?.kvUtilisation ?? null,
    basis: repack32Basis,
  },
  {
    id: 'tab1.kv_util.without_repack',
    figure: 'tab1.kv_util',
    what: 'Mean KV utilisation without repack',
    paper: part('tab1.kv_util', 'withoutRepack'),
    simulated: (f) => f.withoutRepack?.kvUtilisation ?? null,
    basis: repack32Basis,
  },
  {
    id: 'sec8_4.kv_util_gain',
    what: 'Mean KV utilisation, with repack ÷ without',
    paper: () => 1 + num('sec8_4.kv_util_gain'),
    simulated: (f) => (f.repackBoth ? f.withRepack!.kvUtilisation / f.withoutRepack!.kvUtilisation : null),
    basis: repack32Basis,
  },
  {
    id: 'fig15.gen_throughput_gain',
    what: 'Generation throughput, with repack ÷ without',
    paper: () => 1 + num('fig15.gen_throughput_gain'),
    simulated: (f) => (f.repackBoth ? f.withRepack!.generationTokensPerS / f.withoutRepack!.generationTokensPerS : null),
    basis: repack32Basis,
  },

  // Analytic: the relays' chunk model (§4.2) and the trainer's push (§8.3), per scenario's model.
  {
    id: 'sec4_2.broadcast_72b_127',
    simulated: (f) => (f.s72 ? f.s72.broadcast128.seconds : null),
    bound: () => belowScaled('sec4_2.broadcast_72b_127'),
    basis: (f) => (f.s72 ? `chunk model, ${f.s72.name}'s link, ${(f.s72.broadcast128.chunkBytes / 2 ** 20).toFixed(0)} MiB chunks, p = 128` : 'a 72B scenario'),
  },
  ...(['32B', '72B'] as const).map((model): FigureSpec => ({
    id: `sec8_3.actor_stall.${model}`,
    figure: 'sec8_3.actor_stall',
    what: `Actor stall per publication, ${model}`,
    paper: part('sec8_3.actor_stall', model),
    simulated: (f) => f.summaries.find((x) => x.paperModel === model)?.actorStallS ?? null,
    basis: (f) => {
      const s = f.summaries.find((x) => x.paperModel === model);
      return s ? `weight bytes / ${s.name}'s trainer-to-master bandwidth` : `a ${model} scenario`;
    },
  })),

  // §4.3: the chain's repairs, from the relays' chain (RelayChain ordered by arrangeChain): the
  // 72B study's chain of 128 relays, and every repair of the runs with failures.
  {
    id: 'sec4_3.chain_repair',
    simulated: (f) => maxOf(f.relayRepairs),
    bound: (f) => {
      const bound = belowScaled('sec4_3.chain_repair', ', a splice');
      return { text: bound.text, holds: (x) => bound.holds(x) && f.splices };
    },
    basis: (f) =>
      `${f.s72 ? `${f.s72.name}: 128 relays, hop 64 dies mid-broadcast` : 'no 72B scenario'}${f.runRepairs.length ? `; ${f.runRepairs.length} repair(s) in runs with failures` : ''}; the scenario's detection + publication delays`,
  },
  {
    id: 'sec4_3.master_reelection',
    simulated: (f) => maxOf(f.masterRepairs),
    bound: () => belowScaled('sec4_3.master_reelection'),
    basis: (f) =>
      f.s72
        ? `${f.s72.name}: the master of 128 relays dies mid-broadcast; new master ${f.s72.broadcast.masterRepair.masterAfter} (arrangeChain)`
        : 'no 72B scenario',
  },

  // Figure 12: the tool-call task's scenarios (7B rows).
  {
    id: `${fig12}.min`,
    figure: fig12,
    what: "Figure 12: laminar's smallest speedup over the baselines (tool call, 7B)",
    paper: end(fig12, 0),
    simulated: (f) => minOf(f.toolSpeedups),
    bound: () => {
      const bound = end(fig12, 0)() / (1 + tol(fig12));
      return { text: `≥ ${bound.toFixed(2)} (paper ÷ 1.15)`, holds: (x) => x >= bound };
    },
    basis: fig12Basis,
  },
  {
    id: `${fig12}.max`,
    figure: fig12,
    what: "Figure 12: laminar's largest speedup over the baselines (tool call, 7B)",
    paper: end(fig12, 1),
    simulated: (f) => maxOf(f.toolSpeedups),
    bound: () => {
      const bound = end(fig12, 1)() * (1 + tol(fig12));
      return { text: `≤ ${bound.toFixed(2)} (paper × 1.15)`, holds: (x) => x <= bound };
    },
    basis: fig12Basis,
  },
  {
    id: 'fig12.avg_speedup.tool_call',
    simulated: (f) => meanOf(f.toolSpeedups),
    basis: fig12Basis,
  },
  {
    id: 'fig12.scaling_efficiency',
    what: "Figure 12: laminar's strong-scaling efficiency on the tool-call task",
    simulated: (f) => meanOf(f.toolEfficiency),
    basis: () => 'laminar on the tool-call scenario(s), smallest → largest scale run',
  },
  {
    id: 'fig12.scaling_efficiency.best_baseline',
    figure: 'fig12.scaling_efficiency',
    what: "Figure 12: the best baseline's strong-scaling efficiency on the tool-call task (stream in the paper)",
    paper: other('fig12.scaling_efficiency', 'baselineValue'),
    simulated: (f) => f.toolBaselineEfficiency,
    basis: () => 'the best of the baselines on the tool-call scenario(s), smallest → largest scale run',
  },

  // §8.5 / Figure 16: a machine failure in a run (failure-32b-128).
  {
    id: 'sec8_5.generation_drop',
    simulated: (f) => f.generationDrop,
    // A drop it is: generation during the failure at or above the rate before is no drop.
    alsoHolds: (x) => x < 1,
    basis: (f) => `${f.failureBasis}; the outage's windows against the same windows of the run without the failure`,
  },
  {
    id: 'sec8_5.training_unaffected',
    simulated: (f) => f.trainingRatio,
    bound: () => ({ text: '≥ 0.85 (unaffected or a slight drop)', holds: (x) => x >= 0.85 }),
    basis: (f) => `${f.failureBasis}; training steps per hour`,
  },
  {
    id: 'sec8_5.generation_recovered',
    simulated: (f) => f.generationRecovered,
    basis: (f) => `${f.failureBasis}; the windows after the replacement against the same windows of the run without the failure`,
  },
];

function sourceOf(id: string): string {
  const s = paperFigure(id).source;
  return [s.section, s.figure, s.table].filter((x) => x !== undefined).join(', ');
}

/** One spec's row from the facts. */
function evaluate(spec: FigureSpec, facts: ComparisonFacts): ComparisonRow {
  const figure = spec.figure ?? spec.id;
  const paper = spec.paper ? spec.paper() : num(figure);
  const simulated = spec.simulated(facts);
  const bound = spec.bound?.(facts) ?? null;
  const tolerance = bound === null ? tol(figure) : null;
  const ratio = simulated === null || paper === 0 ? null : simulated / paper;
  let within: boolean | null = null;
  if (simulated !== null) {
    within = bound !== null ? bound.holds(simulated) : Math.abs(ratio! - 1) <= tolerance! + 1e-12 && (spec.alsoHolds?.(simulated) ?? true);
  }
  return {
    id: spec.id,
    what: spec.what ?? paperFigure(figure).what,
    source: sourceOf(figure),
    paper,
    simulated,
    ratio,
    check: bound === null ? 'tolerance' : 'bound',
    tolerance,
    bound: bound === null ? null : bound.text,
    within,
    basis: spec.basis(facts),
    why: within === true ? null : whyNotWithin(spec.id, simulated === null),
  };
}

export function compareWithPaper(summaries: readonly ScenarioSummary[], runs: readonly ScenarioRunResult[]): ComparisonRow[] {
  const facts = comparisonFacts(summaries, runs);
  return FIGURES.map((spec) => evaluate(spec, facts));
}
