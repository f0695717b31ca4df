/**
 * The report's tables (docs/design/simulator.md, "Outputs"), each a function of results.json
 * alone, rendered as Markdown (tables.md, the README) or as aligned text (the CLI's stdout):
 *
 * - throughput: (model, GPUs) × system, tokens/s, and laminar's speedup over each other system;
 * - paper comparison: each validated figure, paper against simulated, and why where they differ;
 * - staleness: inherent and consumption p50/p90/max per run;
 * - repack: laminar with and without repack at each (model, GPUs) where both ran;
 * - broadcast: T(p) per scenario's model from the relays' chunk model, the bandwidth that gives
 *   the paper's 1.6 s, and the chain repairs (a relay's and the master's death, the runs' repairs);
 * - failure: generation and training throughput around each machine failure (§8.5), per window.
 */
import { SYSTEMS, type SystemName } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { failureEffect } from './failure-effect.js';
import { runsByPoint, type ComparisonRow } from './paper-comparison.js';
import { paperFigure } from './paper.js';
import type { SimulationResults } from './results.js';

export interface Table {
  title: string;
  /** One sentence on what the table shows and how to read it. */
  caption: string;
  columns: string[];
  rows: string[][];
}

/** The systems present in the runs, in SYSTEMS order. */
export function systemsIn(runs: readonly ScenarioRunResult[]): SystemName[] {
  return SYSTEMS.filter((s) => runs.some((r) => r.system === s));
}

/** The scenario's model for a table's first column, with the scenario's name where another scenario of the results has the same model (math-7b and toolcall-7b). */
function modelLabel(results: SimulationResults, scenario: string): string {
  const model = (x: SimulationResults['scenarios'][number]): string => x.paperModel ?? x.model;
  const s = results.scenarios.find((x) => x.name === scenario);
  if (s === undefined) return scenario;
  return results.scenarios.some((x) => x !== s && model(x) === model(s)) ? `${model(s)} (${s.name})` : model(s);
}

/** (scenario, GPUs) points in scenario order, then by GPUs. */
export function orderedPoints(results: SimulationResults): Array<{ scenario: string; gpus: number; bySystem: Map<SystemName, ScenarioRunResult> }> {
  const order = new Map(results.scenarios.map((s, i) => [s.name, i]));
  return [...runsByPoint(results.runs).values()]
    .map((bySystem) => {
      const any = bySystem.values().next().value!;
      return { scenario: any.scenario, gpus: any.gpus, bySystem };
    })
    .sort((a, b) => (order.get(a.scenario) ?? 0) - (order.get(b.scenario) ?? 0) || a.gpus - b.gpus);
}

const thousands = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

export function formatNumber(x: number | null): string {
  if (x === null || !Number.isFinite(x)) return '—';
  if (Math.abs(x) >= 1000) return thousands.format(x);
  if (Math.abs(x) >= 100) return x.toFixed(0);
  if (Number.isInteger(x)) return String(x);
  return Number(x.toPrecision(3)).toString();
}

const pct = (x: number): string => `${(x * 100).toFixed(1)} %`;
const times = (x: number): string => `${x.toFixed(2)}×`;

export function throughputTable(results: SimulationResults): Table {
  const systems = systemsIn(results.runs);
  const others = systems.filter((s) => s !== 'laminar');
  const withSpeedups = systems.includes('laminar');
  const columns = ['model', 'GPUs', ...systems.map((s) => `${s} tokens/s`), ...(withSpeedups ? others.map((s) => `laminar ÷ ${s}`) : [])];
  const rows = orderedPoints(results).map(({ scenario, gpus, bySystem }) => {
    const tps = (s: SystemName): number | undefined => bySystem.get(s)?.throughput.tokensPerS;
    const lam = tps('laminar');
    return [
      modelLabel(results, scenario),
      String(gpus),
      ...systems.map((s) => formatNumber(tps(s) ?? null)),
      ...(withSpeedups
        ? others.map((s) => {
            const b = tps(s);
            return lam !== undefined && b !== undefined && b > 0 ? times(lam / b) : '—';
          })
        : []),
    ];
  });
  return {
    title: 'Throughput',
    caption:
      "Training throughput, the paper's metric: prompt + response tokens of the batches trained after the warm-up steps, over the time between their actor-update completions; laminar's speedup over each other system at the same (model, GPUs).",
    columns,
    rows,
  };
}

function checkText(r: ComparisonRow): string {
  return r.check === 'tolerance' ? `±${Math.round((r.tolerance ?? 0) * 100)} %` : (r.bound ?? '');
}

export function comparisonTable(results: SimulationResults): Table {
  const rows = results.comparison.map((r) => [
    r.id,
    `${r.what} (${r.source}; ${r.basis})`,
    formatNumber(r.paper),
    formatNumber(r.simulated),
    r.ratio === null ? '—' : r.ratio.toFixed(2),
    checkText(r),
    r.within === null ? '—' : r.within ? 'yes' : '**no**',
    r.why ?? '',
  ]);
  return {
    title: 'Paper comparison',
    caption:
      'Each figure of src/simulate/paper-figures.json that the simulator validates: the paper\'s value, the simulated one, their ratio and the check (±15 % or a bound). "why" gives the reason where the check fails or these runs cannot give the figure; no constant is tuned to match.',
    columns: ['figure', 'what', 'paper', 'simulated', 'sim/paper', 'check', 'within', 'why'],
    rows,
  };
}

export function stalenessTable(results: SimulationResults): Table {
  const systems = systemsIn(results.runs);
  const rows: string[][] = [];
  for (const { scenario, gpus, bySystem } of orderedPoints(results)) {
    for (const s of systems) {
      const r = bySystem.get(s);
      if (r === undefined) continue;
      const { inherent: i, consumption: c } = r.staleness;
      rows.push([
        modelLabel(results, scenario),
        String(gpus),
        s,
        String(i.p50),
        String(i.p90),
        String(i.max),
        String(c.p50),
        String(c.p90),
        String(c.max),
        formatNumber(c.count),
      ]);
    }
  }
  return {
    title: 'Staleness',
    caption:
      'Inherent staleness (trainer version when a trajectory completes − the version it was generated with, §6) and consumption staleness (trainer version when it is trained on − that version), p50/p90/max over every trajectory of the run.',
    columns: ['model', 'GPUs', 'system', 'inherent p50', 'inherent p90', 'inherent max', 'consumption p50', 'consumption p90', 'consumption max', 'trained'],
    rows,
  };
}

export function repackTable(results: SimulationResults): Table {
  const rows: string[][] = [];
  for (const { scenario, gpus, bySystem } of orderedPoints(results)) {
    const on = bySystem.get('laminar');
    const off = bySystem.get('laminar-no-repack');
    if (on === undefined || off === undefined) continue;
    rows.push([
      modelLabel(results, scenario),
      String(gpus),
      pct(on.kvUtilisation),
      pct(off.kvUtilisation),
      off.kvUtilisation > 0 ? times(on.kvUtilisation / off.kvUtilisation) : '—',
      formatNumber(on.generationTokensPerS),
      formatNumber(off.generationTokensPerS),
      off.generationTokensPerS > 0 ? times(on.generationTokensPerS / off.generationTokensPerS) : '—',
      off.throughput.tokensPerS > 0 ? times(on.throughput.tokensPerS / off.throughput.tokensPerS) : '—',
      String(on.repack.rounds),
      String(on.repack.moves),
      formatNumber(on.repack.movedTrajectories),
    ]);
  }
  return {
    title: 'Repack',
    caption:
      'laminar with repack (Algorithm 1, every 5 s and after each version) against laminar-no-repack on the same GPUs: mean KV utilisation (time-weighted over every rollout engine and the run, idle counting as 0), generation throughput (decoded tokens/s), training throughput, and the rounds, moves and trajectories moved.',
    columns: [
      'model',
      'GPUs',
      'KV util with',
      'KV util without',
      'KV ratio',
      'gen tokens/s with',
      'gen tokens/s without',
      'gen ratio',
      'training ratio',
      'rounds',
      'moves',
      'moved',
    ],
    rows,
  };
}

const seconds = (x: number): string => `${x.toFixed(x < 10 ? 3 : 1)} s`;

/** One row per scenario model: T(p) down the chain, the bandwidth for 1.6 s, and the two repairs of the study. */
export function broadcastTable(results: SimulationResults): Table {
  const bound = paperFigure('sec4_2.broadcast_72b_127').value as number;
  const repairBound = paperFigure('sec4_3.chain_repair').value as number;
  const seen = new Set<string>();
  const rows: string[][] = [];
  for (const s of results.scenarios) {
    const b = s.broadcast;
    const key = `${b.model}/${b.bandwidthGBs}/${b.startupUs}/${b.points.map((p) => p.chunkBytes).join(',')}/${s.scenario.manager.relayFailureDetectS}/${s.scenario.manager.planPublishS}`;
    if (seen.has(key)) continue;
    seen.add(key);
    rows.push([
      s.paperModel ?? s.model,
      `${(b.bytes / 1e9).toFixed(1)} GB`,
      `${b.bandwidthGBs} GB/s, ${b.startupUs} µs`,
      `${(b.points.at(-1)!.chunkBytes / 2 ** 20).toFixed(0)} MiB`,
      ...b.points.map((p) => seconds(p.seconds)),
      `${b.bandwidthFor1p6GBs.toFixed(1)} GB/s`,
      `${seconds(b.relayRepair.repairS)}${b.relayRepair.splice ? ' (splice)' : ' (not a splice)'}`,
      `${seconds(b.relayRepair.lastRelayS)} (+${seconds(b.relayRepair.lastRelayS - b.relayRepair.lastRelayWithoutFailureS)})`,
      `${seconds(b.masterRepair.repairS)}, ${b.masterRepair.masterAfter}`,
      `${seconds(b.masterRepair.lastRelayS)} (+${seconds(b.masterRepair.lastRelayS - b.masterRepair.lastRelayWithoutFailureS)})`,
    ]);
  }
  const runRepairs = results.runs.flatMap((r) => r.chainRepairs.map((c) => ({ r, c })));
  for (const { r, c } of runRepairs) {
    rows.push([
      `${modelLabel(results, r.scenario)} run`,
      `${r.system}, ${r.gpus} GPUs`,
      `${c.wasMaster ? 'master' : 'relay'} ${c.relay} at ${c.atS.toFixed(0)} s`,
      '',
      ...results.scenarios[0]!.broadcast.points.map(() => ''),
      '',
      seconds(c.repairS),
      c.relaysDelayed > 0 ? `${c.relaysDelayed} relay(s) delayed up to ${seconds(c.maxDelayS)}` : 'no version in flight',
      c.wasMaster ? `new master ${c.orderAfter[0]}` : '',
      '',
    ]);
  }
  const ps = results.scenarios[0]?.broadcast.points.map((p) => `T(${p.relays})`) ?? [];
  return {
    title: 'Broadcast and chain repair',
    caption: `A version down the relay chain from the relays' chunk model (appendix C: T(p, k) = (p + k − 2)(M/k · T_byte + T_start)), for p relays with the master, at each scenario's relay link and chunk size; the relay bandwidth that would make T(128) exactly the paper's ${bound} s (§4.2: "less than 1.6 seconds ... to 127 other relays"); and, on a chain of 128 relays ordered by the manager's arrangeChain, the repair when the relay 64 hops down dies halfway through a broadcast (failure → the spliced plan in force, the paper's bound ${repairBound} s, §4.3) and when the master dies (the relay holding the most of the version elected), with when the last relay holds the version (+ the delay against no failure). Then each repair in the runs with failures.`,
    columns: [
      'model',
      'weights',
      'relay link',
      'chunk (p = 128)',
      ...ps,
      'bandwidth for 1.6 s',
      'relay repair',
      'last relay holds',
      'master repair, new master',
      'last relay holds',
    ],
    rows,
  };
}

/** Per machine failure in the runs: the §8.5 effect, then the windows around it. */
export function failureTable(results: SimulationResults): Table {
  const rows: string[][] = [];
  for (const r of results.runs) {
    const e = failureEffect(r);
    if (e === null) continue;
    const ratio = (x: number | null): string => (x === null || !Number.isFinite(x) || !(e.generationBefore > 0) ? '—' : times(x / e.generationBefore));
    const against = (x: number | null, without: number | null): string =>
      without === null ? '—' : `${formatNumber(without)} (${x === null || !(without > 0) ? '—' : times(x / without)})`;
    rows.push([
      modelLabel(results, r.scenario),
      String(r.gpus),
      r.system,
      `${e.rolloutsLost} of ${e.rolloutsBefore} at ${e.atS.toFixed(0)} s`,
      e.backAtS === null ? 'never' : `${e.backAtS.toFixed(0)} s`,
      formatNumber(e.generationBefore),
      `${formatNumber(e.generationDuring)} (${ratio(e.generationDuring)})`,
      against(e.generationDuring, e.generationDuringWithout),
      e.generationAfter === null ? '—' : `${formatNumber(e.generationAfter)} (${ratio(e.generationAfter)})`,
      against(e.generationAfter, e.generationAfterWithout),
      Number.isFinite(e.stepsPerHourBefore) ? e.stepsPerHourBefore.toFixed(2) : '—',
      e.stepsPerHourDuring === null ? '—' : `${e.stepsPerHourDuring.toFixed(2)} (${times(e.stepsPerHourDuring / e.stepsPerHourBefore)})`,
      `${e.orphaned} / ${e.resumed} / ${e.returned}`,
    ]);
  }
  return {
    title: 'Machine failure and recovery',
    caption:
      "A rollout machine killed during training and replaced (§8.5, Figure 16): mean generation throughput (tokens decoded by every engine per second, per window of run.reportWindowS) over the same span before the failure, while the machine was down, and from one window after the replacement joined to the end of the run; the same windows of the same run without the failure (identical up to it), which §8.5's rows compare with (the span before the failure is another phase of the rollouts' cycle, their claims following the trainer's versions); the trainer's steps per hour before and across the outage; and the failed rollouts' trajectories orphaned / resumed on a live rollout of their version / returned to the prompt pool. No trajectory is lost or made twice (the ledger). The per-window timeline is in results.json and failure-<scenario>.svg.",
    columns: [
      'model',
      'GPUs',
      'system',
      'rollouts lost',
      'replaced',
      'gen tokens/s before',
      'during (÷ before)',
      'during without the failure (during ÷ it)',
      'after (÷ before)',
      'after without the failure (after ÷ it)',
      'steps/h before',
      'across the outage',
      'orphaned / resumed / returned',
    ],
    rows,
  };
}

/** Every table of the report, in the order tables.md has them (empty ones left out). */
export function reportTables(results: SimulationResults): Table[] {
  return [
    throughputTable(results),
    comparisonTable(results),
    stalenessTable(results),
    repackTable(results),
    broadcastTable(results),
    failureTable(results),
  ].filter((t) => t.rows.length > 0);
}

const escapeCell = (s: string): string => s.replace(/\|/g, '\\|');

export function toMarkdown(table: Table): string {
  const line = (cells: string[]): string => `| ${cells.map(escapeCell).join(' | ')} |`;
  return [`## ${table.title}`, '', table.caption, '', line(table.columns), line(table.columns.map(() => '---')), ...table.rows.map(line), ''].join('\n');
}

/** Aligned columns for a terminal; `maxCell` cuts long cells (the comparison's reasons). */
export function toText(table: Table, maxCell = 48): string {
  const cut = (s: string): string => (s.length > maxCell ? `${s.slice(0, maxCell - 1)}…` : s);
  const cells = [table.columns, ...table.rows].map((r) => r.map((c) => cut(c.replace(/\*\*/g, ''))));
  const widths = table.columns.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const lines = cells.map((r) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd(),
  );
  return [table.title, ...lines.slice(0, 1), widths.map((w) => '-'.repeat(w)).join('  '), ...lines.slice(1), ''].join('\n');
}

/** tables.md: a heading, what was run, then every table. */
export function tablesMarkdown(results: SimulationResults): string {
  const names = results.scenarios.map((s) => `\`${s.name}\``).join(', ');
  const head = [
    '# Simulated results',
    '',
    `Written by the cluster simulator (\`laminar simulate\`, docs/components/simulator.md) from results.json: ${results.totals.runs} run(s) of ${names}, ${formatNumber(results.totals.events)} events, ${formatNumber(results.totals.virtualS)} s of virtual time in ${results.totals.wallS.toFixed(1)} s of wall time.`,
    '',
  ];
  return [...head, ...reportTables(results).map(toMarkdown)].join('\n');
}
