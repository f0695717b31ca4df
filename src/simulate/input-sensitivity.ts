/**
 * What the inputs the paper does not give do to the comparison rows they reach (issue #48): the
 * output lengths' median and tail (Figure 17 gives the checkpoints' distributions only as an
 * image) and the trainer's MFU. Each variant changes those fields of the three math scenarios,
 * as `laminar simulate --set` would, and runs every system but laminar-no-repack on each
 * scenario's smallest and largest cluster: the points that give the largest-scale speedups,
 * §2.3's idle shares and the strong-scaling efficiencies exactly as the full sweep does, and the
 * maximum inherent staleness over them, which the full sweep's can only exceed (`INPUT_ROWS`).
 * The answer it is for: does any single choice of these inputs bring those rows within the
 * paper's together, or do they pull apart?
 *
 *   const study = runInputSensitivity({ steps: 15, progress: (line) => process.stderr.write(line) });
 *   const table = inputSensitivityTable(study);
 *
 * `npm run bench -- simulate --no-sweep --inputs [--write-docs]` runs it
 * (docs/components/simulator.md, "The inputs the paper does not give").
 */
import { readFileSync } from 'node:fs';
import { resolveScenarioPath } from './files.js';
import type { ComparisonRow } from './report/paper-comparison.js';
import { buildResults } from './report/results.js';
import type { Table } from './report/tables.js';
import { comparisonVariantsTable } from './report/variants-table.js';
import { parseScenario } from './scenario/load.js';
import { applyOverrides, parseOverrides } from './scenario/overrides.js';
import type { ScenarioInput, SystemName } from './scenario/schema.js';
import { simulateRuns } from './simulate-runs.js';
import type { ScenarioRunResult } from './systems/run-context.js';

export const INPUT_SCENARIOS = ['math-7b', 'math-32b', 'math-72b'] as const;
/** Figure 11's systems: laminar and its four baselines (repack's own effect is not the question here). */
export const INPUT_SYSTEMS: readonly SystemName[] = ['laminar', 'one-step', 'stream', 'sync', 'areal'];

/**
 * The rows the smallest and largest cluster of each math scenario give as the full sweep does; the
 * maximum staleness over them, a lower bound of the full sweep's.
 */
export const INPUT_ROWS = [
  'fig11.avg_speedup.largest_scale_all_baselines',
  'sec2.idle_fraction.largest_scale.sync',
  'sec2.idle_fraction.largest_scale.one_step',
  'sec8_1.max_inherent_staleness',
  'fig11.scaling_efficiency.laminar',
  'fig11.scaling_efficiency.laminar.max',
  'fig11.scaling_efficiency.best_baseline',
  'fig11.scaling_efficiency.best_baseline.max',
] as const;

export interface InputVariant {
  key: string;
  /** What it changes, for the column heading. */
  label: string;
  /** The `laminar simulate --set` texts that make it from a scenario's own fields. */
  sets(input: ScenarioInput): string[];
}

/** The median schedule scaled so that it starts at `tokens` (its drift over training kept in proportion). */
function medianFrom(tokens: number): (input: ScenarioInput) => string {
  return (input) => {
    const points = input.workload.outputTokens.median;
    const scale = tokens / points[0]!.tokens;
    return `workload.outputTokens.median=${JSON.stringify(points.map((p) => ({ step: p.step, tokens: Math.round(p.tokens * scale) })))}`;
  };
}

export const INPUT_VARIANTS: readonly InputVariant[] = [
  { key: 'shipped', label: 'shipped', sets: () => [] },
  { key: 'median-2500', label: 'median 2,500', sets: (input) => [medianFrom(2500)(input)] },
  { key: 'median-1500', label: 'median 1,500', sets: (input) => [medianFrom(1500)(input)] },
  { key: 'p99-5', label: 'p99/median 5', sets: () => ['workload.outputTokens.p99OverMedian=5'] },
  { key: 'p99-20', label: 'p99/median 20', sets: () => ['workload.outputTokens.p99OverMedian=20'] },
  { key: 'mfu-0.25', label: 'MFU 0.25', sets: () => ['trainer.mfu=0.25'] },
  {
    key: 'median-2500-p99-5',
    label: 'median 2,500, p99/median 5',
    sets: (input) => [medianFrom(2500)(input), 'workload.outputTokens.p99OverMedian=5'],
  },
  {
    key: 'median-1500-p99-5',
    label: 'median 1,500, p99/median 5',
    sets: (input) => [medianFrom(1500)(input), 'workload.outputTokens.p99OverMedian=5'],
  },
  {
    key: 'median-1500-p99-5-mfu-0.25',
    label: 'median 1,500, p99/median 5, MFU 0.25',
    sets: (input) => [medianFrom(1500)(input), 'workload.outputTokens.p99OverMedian=5', 'trainer.mfu=0.25'],
  },
];

export interface InputVariantResult {
  variant: InputVariant;
  /** The --set texts per scenario. */
  sets: Record<string, string[]>;
  rows: ComparisonRow[];
  runs: ScenarioRunResult[];
  wallS: number;
}

export interface InputSensitivityOptions {
  variants?: readonly InputVariant[];
  scenarios?: readonly string[];
  /** Training steps per run (default: the scenarios' own, 15 with 10 of warm-up as the paper measures). */
  steps?: number;
  progress?: (line: string) => void;
}

export function runInputSensitivity(options: InputSensitivityOptions = {}): InputVariantResult[] {
  const names = options.scenarios ?? INPUT_SCENARIOS;
  const raw = names.map((name) => {
    const path = resolveScenarioPath(name);
    return { name, path, input: JSON.parse(readFileSync(path, 'utf8')) as ScenarioInput };
  });
  return (options.variants ?? INPUT_VARIANTS).map((variant, v, all) => {
    const sets: Record<string, string[]> = {};
    const scenarios = raw.map(({ name, path, input }) => {
      sets[name] = variant.sets(input);
      return parseScenario(applyOverrides(input, parseOverrides(sets[name])), path);
    });
    const runs: ScenarioRunResult[] = [];
    let wallS = 0;
    for (const scenario of scenarios) {
      const sizes = scenario.placements.map((p) => p.gpus);
      const results = simulateRuns([scenario], {
        systems: INPUT_SYSTEMS.filter((s) => scenario.systems.includes(s)),
        gpus: [Math.min(...sizes), Math.max(...sizes)],
        steps: options.steps,
        progress: (e) => {
          if (e.kind === 'end')
            options.progress?.(
              `inputs ${v + 1}/${all.length} ${variant.key}: ${scenario.name} ${e.run.gpus} GPUs ${e.run.system} (${e.index + 1}/${e.total}) ${(e.result.wallMs / 1e3).toFixed(2)} s\n`,
            );
        },
      });
      runs.push(...results.runs);
      wallS += results.totals.wallS;
    }
    return { variant, sets, rows: buildResults(scenarios, runs, wallS).comparison, runs, wallS };
  });
}

/** The study as a table: the simulated value of each of INPUT_ROWS per variant, ✗ outside its check. */
export function inputSensitivityTable(study: readonly InputVariantResult[]): Table {
  return comparisonVariantsTable(
    study.map((s) => ({ label: s.variant.label, rows: s.rows })),
    {
      title: 'The inputs the paper does not give',
      caption:
        "The simulated value of each row with the math scenarios' output lengths and trainer MFU changed as each column says (the rest as shipped), every system but laminar-no-repack on each scenario's smallest and largest cluster; ✗ marks a row outside its check (±15 %, or the bound).",
      ids: INPUT_ROWS,
      cell: 'value',
    },
  );
}
