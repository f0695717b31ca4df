/**
 * The report from a fixed results object (no simulation): the throughput, paper-comparison,
 * staleness and repack tables, their Markdown and text forms, and the SVG charts drawn from the
 * same object. The runs' numbers are chosen so that each check of the comparison lands on a
 * known side of its tolerance.
 */
import { describe, expect, it } from 'vitest';
import { resolveScenarioPath } from '../../src/simulate/files.js';
import { renderCharts } from '../../src/simulate/report/charts.js';
import { buildResults, type SimulationResults } from '../../src/simulate/report/results.js';
import {
  comparisonTable,
  repackTable,
  broadcastTable,
  failureTable,
  reportTables,
  stalenessTable,
  tablesMarkdown,
  throughputTable,
  toMarkdown,
  toText,
} from '../../src/simulate/report/tables.js';
import { loadScenario } from '../../src/simulate/scenario/load.js';
import type { SystemName } from '../../src/simulate/scenario/schema.js';
import type { ScenarioRunResult } from '../../src/simulate/systems/run-context.js';
import { svgProblems } from './svg-check.js';

const math7b = loadScenario(resolveScenarioPath('math-7b'));
const math32b = loadScenario(resolveScenarioPath('math-32b'));

interface Fake {
  tokensPerS: number;
  kv?: number;
  gen?: number;
  inherent?: [number, number, number];
  consumption?: [number, number, number];
  byVersionP90?: number[];
}

function fakeRun(scenario: string, gpus: number, system: SystemName, f: Fake): ScenarioRunResult {
  const [ip50, ip90, imax] = f.inherent ?? [0, 0, 0];
  const [cp50, cp90, cmax] = f.consumption ?? [0, 0, 0];
  const summary = (p50: number, p90: number, max: number) => ({ count: 1000, p50, p90, max, mean: p50, histogram: { [p50]: 1000 } });
  return {
    scenario,
    system,
    gpus,
    placement: {
      system,
      gpus,
      trainGpus: gpus / 2,
      rolloutGpus: gpus / 2,
      colocated: system === 'sync',
      tp: 1,
      rollouts: gpus / 2,
      rolloutMachines: gpus / 16,
    },
    steps: 6,
    warmupSteps: 3,
    virtualS: 600,
    stepEndsS: [100, 200, 300, 400, 500, 600],
    throughput: { tokensPerS: f.tokensPerS, trajectoriesPerS: f.tokensPerS / 1000 },
    generationTokensPerS: f.gen ?? f.tokensPerS,
    staleness: {
      inherent: summary(ip50, ip90, imax),
      consumption: summary(cp50, cp90, cmax),
      inherentByVersion: (f.byVersionP90 ?? []).map((p90) => ({ count: 10, p50: 0, p90, max: p90, mean: 0 })),
    },
    kvUtilisation: f.kv ?? 0.5,
    idleGpuShare: 0.2,
    engines: { count: 4, kvCapacityTokens: 1e6, preemptions: 0, eventSteps: 10, leapedSteps: 90, prefillTokens: 0 },
    repack: system === 'laminar' ? { rounds: 120, moves: 7, movedTrajectories: 1234 } : { rounds: 0, moves: 0, movedTrajectories: 0 },
    toolCalls: 0,
    failures: [],
    chainRepairs: [],
    timeline: null,
    timelineWithoutFailures: null,
    ledger: { claimed: 6144, generating: 0, moving: 0, buffered: 0, consumed: 6144, dropped: 0 } as ScenarioRunResult['ledger'],
    events: 5000,
    wallMs: 250,
  };
}

// Out of order on purpose: the tables sort by scenario, then GPUs.
const runs: ScenarioRunResult[] = [
  fakeRun('math-32b', 128, 'laminar', { tokensPerS: 268_000, kv: 0.8, gen: 110_000, inherent: [1, 2, 3], consumption: [1, 2, 3] }),
  fakeRun('math-32b', 128, 'laminar-no-repack', { tokensPerS: 250_000, kv: 0.7, gen: 100_000, inherent: [1, 2, 3] }),
  fakeRun('math-32b', 128, 'sync', { tokensPerS: 100_000 }),
  fakeRun('math-7b', 64, 'laminar', { tokensPerS: 200_000, inherent: [1, 2, 5], consumption: [2, 3, 5], byVersionP90: [0, 1, 2] }),
  fakeRun('math-7b', 64, 'sync', { tokensPerS: 80_000 }),
  fakeRun('math-7b', 64, 'one-step', { tokensPerS: 100_000, consumption: [1, 1, 1] }),
  fakeRun('math-7b', 16, 'laminar', { tokensPerS: 100_000, inherent: [0, 1, 1] }),
  fakeRun('math-7b', 16, 'sync', { tokensPerS: 40_000 }),
  fakeRun('math-7b', 16, 'one-step', { tokensPerS: 50_000 }),
];
const results: SimulationResults = buildResults([math7b, math32b], runs, 1.5);
const row = (id: string) => results.comparison.find((c) => c.id === id)!;

describe('the throughput table', () => {
  const t = throughputTable(results);
  it('has a column per system present and laminar over each of the others', () => {
    expect(t.columns).toEqual([
      'model',
      'GPUs',
      'laminar tokens/s',
      'laminar-no-repack tokens/s',
      'one-step tokens/s',
      'sync tokens/s',
      'laminar ÷ laminar-no-repack',
      'laminar ÷ one-step',
      'laminar ÷ sync',
    ]);
  });
  it('orders rows by scenario then GPUs, with a dash where a system did not run', () => {
    expect(t.rows).toEqual([
      ['7B', '16', '100,000', '—', '50,000', '40,000', '—', '2.00×', '2.50×'],
      ['7B', '64', '200,000', '—', '100,000', '80,000', '—', '2.00×', '2.50×'],
      ['32B', '128', '268,000', '250,000', '—', '100,000', '1.07×', '—', '2.68×'],
    ]);
  });
});

describe('the paper comparison', () => {
  it('averages laminar over sync across the points and finds it within ±15 % of 2.56', () => {
    const avg = row('fig11.avg_speedup.verl');
    expect(avg.simulated).toBeCloseTo((2.5 + 2.5 + 2.68) / 3, 10);
    expect(avg.paper).toBe(2.56);
    expect(avg.within).toBe(true);
    expect(avg.why).toBeNull();
    expect(avg.basis).toBe('3 of 15 (model, GPUs) points');
  });
  it('gives the reason where a figure is outside its tolerance, without touching the number', () => {
    const max = row('fig11.max_speedup.verl');
    expect(max.simulated).toBeCloseTo(2.68, 10);
    expect(max.ratio).toBeCloseTo(2.68 / 5.49, 10);
    expect(max.within).toBe(false);
    expect(max.why).toMatch(/Figure 11's per-point values are an image/);
  });
  it('computes the scaling efficiency per model with two sizes or more', () => {
    // 7B: 200,000 / 100,000 over 64 / 16 GPUs = 0.5; 32B ran at one size only.
    expect(row('fig11.scaling_efficiency.laminar').simulated).toBeCloseTo(0.5, 10);
    expect(row('fig11.scaling_efficiency.laminar').within).toBe(true);
  });
  it('checks bounds: the largest inherent staleness (5 > 4) fails, the 7B 64-GPU p90 (2 < 3) holds', () => {
    expect(row('sec8_1.max_inherent_staleness')).toMatchObject({ simulated: 5, within: false, check: 'bound', bound: '≤ 4' });
    expect(row('sec8_1.max_inherent_staleness').why).toMatch(/claim-policy\.ts.*claims again only when its engine is empty/);
    expect(row('fig10.inherent_staleness_typical')).toMatchObject({ simulated: 2, within: true, why: null });
  });
  it('compares repack on 32B at 128 GPUs as ratios', () => {
    expect(row('tab1.kv_util.with_repack')).toMatchObject({ paper: 0.822, simulated: 0.8, within: true });
    expect(row('tab1.kv_util.without_repack')).toMatchObject({ paper: 0.716, simulated: 0.7, within: true });
    expect(row('sec8_4.kv_util_gain').paper).toBeCloseTo(1.148, 10);
    expect(row('sec8_4.kv_util_gain').simulated).toBeCloseTo(0.8 / 0.7, 10);
    expect(row('fig15.gen_throughput_gain').simulated).toBeCloseTo(1.1, 10);
    expect(row('fig15.gen_throughput_gain').within).toBe(true);
  });
  it("takes the analytic figures from the scenarios' own inputs, and says what is missing", () => {
    // math-32b: 65.5 GB pushed at 100 GB/s.
    expect(row('sec8_3.actor_stall.32B').simulated).toBeCloseTo(0.655, 3);
    expect(row('sec8_3.actor_stall.72B')).toMatchObject({ simulated: null, within: null, why: 'needs a scenario of that model' });
    expect(row('sec4_2.broadcast_72b_127')).toMatchObject({ simulated: null, why: 'needs a 72B scenario' });
    // No 72B scenario and no run with failures: no repair to report.
    expect(row('sec4_3.chain_repair')).toMatchObject({ simulated: null, within: null });
    expect(row('sec4_3.chain_repair').why).toMatch(/needs a 72B scenario or a run with a relay failure/);
  });
  it('renders every row with its check and verdict', () => {
    const t = comparisonTable(results);
    expect(t.columns).toEqual(['figure', 'what', 'paper', 'simulated', 'sim/paper', 'check', 'within', 'why']);
    const max = t.rows.find((r) => r[0] === 'fig11.max_speedup.verl')!;
    expect(max.slice(2, 7)).toEqual(['5.49', '2.68', '0.49', '±15 %', '**no**']);
    const stall = t.rows.find((r) => r[0] === 'sec8_3.actor_stall.72B')!;
    expect(stall.slice(3, 7)).toEqual(['—', '—', '±15 %', '—']);
  });
});

describe('the staleness and repack tables', () => {
  it('has one staleness row per run with inherent and consumption p50/p90/max', () => {
    const t = stalenessTable(results);
    expect(t.rows).toHaveLength(runs.length);
    expect(t.rows[3]).toEqual(['7B', '64', 'laminar', '1', '2', '5', '2', '3', '5', '1,000']);
    expect(t.rows.find((r) => r[1] === '64' && r[2] === 'one-step')!.slice(6, 9)).toEqual(['1', '1', '1']);
  });
  it('names the scenario beside the model where two scenarios share it (math-7b and toolcall-7b)', () => {
    const tools = loadScenario(resolveScenarioPath('toolcall-7b'));
    const both = buildResults(
      [math7b, tools],
      [fakeRun('math-7b', 16, 'laminar', { tokensPerS: 1 }), fakeRun('toolcall-7b', 16, 'laminar', { tokensPerS: 1 })],
      0,
    );
    expect(stalenessTable(both).rows.map((r) => r[0])).toEqual(['7B (math-7b)', '7B (toolcall-7b)']);
    expect(throughputTable(both).rows.map((r) => r[0])).toEqual(['7B (math-7b)', '7B (toolcall-7b)']);
  });
  it('pairs laminar with laminar-no-repack where both ran', () => {
    const t = repackTable(results);
    expect(t.rows).toEqual([['32B', '128', '80.0 %', '70.0 %', '1.14×', '110,000', '100,000', '1.10×', '1.07×', '120', '7', '1,234']]);
  });
});

describe('Markdown and text', () => {
  it('writes each table as a Markdown table with a cell per column, pipes escaped', () => {
    for (const t of reportTables(results)) {
      const md = toMarkdown(t).split('\n');
      expect(md[0]).toBe(`## ${t.title}`);
      const lines = md.filter((l) => l.startsWith('|'));
      expect(lines).toHaveLength(t.rows.length + 2);
      for (const l of lines) expect(l.replace(/\\\|/g, '').split('|').length - 2).toBe(t.columns.length);
    }
    const piped = toMarkdown({ title: 'x', caption: 'c', columns: ['a'], rows: [['p|q']] });
    expect(piped).toContain('| p\\|q |');
  });
  it('tables.md has the heading, what ran, and the five tables (no failure table without failures)', () => {
    const md = tablesMarkdown(results);
    expect(md).toMatch(/^# Simulated results\n/);
    expect(md).toContain('9 run(s) of `math-7b`, `math-32b`');
    expect(md.match(/^## /gm)).toHaveLength(5);
  });
  it('aligns text columns and drops the Markdown emphasis', () => {
    const text = toText(throughputTable(results)).split('\n');
    expect(text[0]).toBe('Throughput');
    expect(text[1]!.indexOf('GPUs')).toBe(text[3]!.indexOf('16'));
    expect(toText(comparisonTable(results))).not.toContain('**');
  });
});

describe('charts', () => {
  it('the well-formedness check catches broken markup', () => {
    expect(svgProblems('<svg xmlns="http://www.w3.org/2000/svg"><g></svg>')).not.toEqual([]);
    expect(svgProblems('<svg xmlns="http://www.w3.org/2000/svg"><text>a & b</text></svg>')).toEqual(['bad entity &']);
    expect(svgProblems('<svg xmlns="http://www.w3.org/2000/svg"><g a="1"><path d="M0 0"/></g></svg>')).toEqual([]);
  });
  it('draws well-formed SVGs from the results alone', () => {
    const charts = renderCharts(results);
    expect(charts.map((c) => c.file)).toEqual([
      'throughput-math-7b.svg',
      'speedup-math-7b.svg',
      'throughput-math-32b.svg',
      'speedup-math-32b.svg',
      'paper-comparison.svg',
      'staleness.svg',
      'repack.svg',
      'broadcast.svg',
    ]);
    for (const c of charts) expect(svgProblems(c.svg), c.file).toEqual([]);
    // The data are in the drawing: the comparison names its figures, the repack chart its series.
    expect(charts.find((c) => c.file === 'paper-comparison.svg')!.svg).toContain('fig11.max_speedup.verl');
    expect(charts.find((c) => c.file === 'repack.svg')!.svg).toContain('KV util, no repack');
  });
});

describe('the broadcast and failure tables and charts', () => {
  const failure32 = loadScenario(resolveScenarioPath('failure-32b-128'));
  const failed = fakeRun('failure-32b-128', 128, 'laminar', { tokensPerS: 250_000 });
  failed.failures = [{ kind: 'machine', atS: 300, machine: 3, rollout: null, rolloutsLost: 2, orphaned: 500, resumed: 480, returned: 20, backAtS: 552 }];
  failed.stepEndsS = [100, 200, 300, 420, 520, 620, 720, 820];
  failed.steps = 8;
  failed.placement = { ...failed.placement, rollouts: 16, rolloutMachines: 8, tp: 4 };
  failed.warmupSteps = 1;
  failed.virtualS = 900;
  // 30-s windows: 160k tokens/s before, 140k while down, 165k after.
  failed.timeline = Array.from({ length: 30 }, (_, i) => ({
    startS: i * 30,
    endS: (i + 1) * 30,
    generationTokensPerS: (i + 1) * 30 <= 300 ? 160_000 : i * 30 < 552 ? 140_000 : 165_000,
    trainingTokensPerS: 0,
    rolloutsAlive: (i + 1) * 30 <= 300 || i * 30 >= 552 ? 16 : 14,
  }));
  // The same run without the failure: the same windows up to it, then 150k (another phase of the
  // rollouts' cycle) up to 552 s and 170k after; its last window ends at 870 s, before the run's.
  failed.timelineWithoutFailures = failed.timeline.slice(0, 29).map((w) => ({
    ...w,
    generationTokensPerS: w.endS <= 300 ? 160_000 : w.startS < 552 ? 150_000 : 170_000,
    rolloutsAlive: 16,
  }));
  failed.chainRepairs = [
    {
      relay: 'm00003',
      wasMaster: false,
      atS: 300,
      repairedAtS: 300.15,
      repairS: 0.15,
      orderBefore: ['m00000', 'm00001', 'm00002', 'm00003'],
      orderAfter: ['m00000', 'm00001', 'm00002'],
      relaysDelayed: 0,
      maxDelayS: 0,
    },
  ];
  const withFailure = buildResults([failure32], [failed], 1);

  it('the broadcast table gives T(p) from the chunk model and the repairs of the study and the runs', () => {
    const t = broadcastTable(withFailure);
    expect(t.columns.slice(4, 11)).toEqual(['T(2)', 'T(4)', 'T(8)', 'T(16)', 'T(32)', 'T(64)', 'T(128)']);
    const study = t.rows[0]!;
    expect(study[0]).toBe('32B');
    // 65.5 GB in 32 MiB chunks (1,953) at 100 GB/s + 5 µs: T(2) = 1,953 chunk times, T(128) = 2,079.
    const chunk = 65.5e9 / 1953 / 100e9 + 5e-6;
    expect(study[4]).toBe(`${(1953 * chunk).toFixed(3)} s`);
    expect(study[10]).toBe(`${(2079 * chunk).toFixed(3)} s`);
    expect(study[12]).toBe('0.440 s (splice)');
    expect(study[14]).toMatch(/^0\.440 s, m00001$/);
    expect(t.rows[1]!.slice(0, 3)).toEqual(['32B run', 'laminar, 128 GPUs', 'relay m00003 at 300 s']);
  });

  it('the failure table and the §8.5 rows read the timeline, the generation rows against the run without the failure', () => {
    const t = failureTable(withFailure);
    expect(t.rows).toHaveLength(1);
    expect(t.rows[0]!.slice(3, 10)).toEqual([
      '2 of 16 at 300 s',
      '552 s',
      '160,000',
      '140,000 (0.88×)',
      '150,000 (0.93×)',
      '165,000 (1.03×)',
      '170,000 (0.97×)',
    ]);
    expect(t.rows[0]![12]).toBe('500 / 480 / 20');
    const r = (id: string) => withFailure.comparison.find((c) => c.id === id)!;
    // The outage's windows over the same windows without the failure, not over the span before it.
    expect(r('sec8_5.generation_drop').simulated).toBeCloseTo(140 / 150, 10);
    expect(r('sec8_5.generation_drop').within).toBe(true);
    expect(r('sec8_5.generation_drop').basis).toContain('without the failure');
    // After the replacement: up to the twin's last window (870 s), the same windows in both.
    expect(r('sec8_5.generation_recovered').simulated).toBeCloseTo(165 / 170, 10);
    // Steps every 100 s before (after the warm-up); across the outage and one step after it
    // (300 → 652 s), 3 steps in 320 s: a slight drop, within the bound.
    expect(r('sec8_5.training_unaffected').simulated).toBeCloseTo(3 / 320 / (1 / 100), 10);
    expect(r('sec8_5.training_unaffected').within).toBe(true);
    expect(r('sec4_3.chain_repair').simulated).toBeCloseTo(0.15, 10);
  });

  it('draws the broadcast and failure charts', () => {
    const charts = renderCharts(withFailure);
    const files = charts.map((c) => c.file);
    expect(files).toContain('broadcast.svg');
    expect(files).toContain('failure-failure-32b-128.svg');
    for (const c of charts) expect(svgProblems(c.svg), c.file).toEqual([]);
    const svg = charts.find((c) => c.file === 'failure-failure-32b-128.svg')!.svg;
    expect(svg).toContain('replacement joins');
    expect(svg).toContain('generation without the failure');
  });

  it('without the run without the failure (results written before it) the generation rows cannot be given', () => {
    const old = buildResults([failure32], [{ ...failed, timelineWithoutFailures: null }], 1);
    const r = (id: string) => old.comparison.find((c) => c.id === id)!;
    expect(r('sec8_5.generation_drop').simulated).toBeNull();
    expect(r('sec8_5.generation_recovered').simulated).toBeNull();
    expect(r('sec8_5.training_unaffected').simulated).not.toBeNull();
    expect(failureTable(old).rows[0]![7]).toBe('—');
  });
});
