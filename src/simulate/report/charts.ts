/**
 * The report's charts as SVG, drawn from results.json alone (a presentation layer: nothing reads
 * them back). Apache ECharts in server-side rendering mode renders them without a browser, a DOM
 * or a canvas (`echarts.init(null, null, { renderer: 'svg', ssr: true })`, `renderToSVGString()`),
 * and GitHub shows the files as they are in the README.
 *
 * - throughput-<scenario>.svg: grouped bars, tokens/s per system at each cluster size;
 * - speedup-<scenario>.svg: laminar's speedup over each other system, lines over GPUs;
 * - paper-comparison.svg: sim/paper per figure, a dot plot with the ±15 % band;
 * - staleness.svg: inherent and consumption p50/p90/max per system at each scenario's largest size;
 * - repack.svg: KV utilisation with and without repack, and the generation throughput ratio;
 * - broadcast.svg: T(p) per model from the relays' chunk model, with the paper's 1.6 s at p = 128;
 * - failure-<scenario>.svg: generation and training throughput per window around a machine
 *   failure, the failure and the replacement marked (Figure 16's shape).
 */
import * as echarts from 'echarts';
import type { SystemName } from '../scenario/schema.js';
import type { ScenarioRunResult } from '../systems/run-context.js';
import { paperFigure } from './paper.js';
import type { SimulationResults } from './results.js';
import { orderedPoints, systemsIn } from './tables.js';

export interface Chart {
  /** File name in the output directory. */
  file: string;
  svg: string;
}

const WIDTH = 860;
const HEIGHT = 440;
/** One colour per system, the same in every chart. */
const SYSTEM_COLOURS: Record<SystemName, string> = {
  laminar: '#2f6fdf',
  'laminar-no-repack': '#8fb3f0',
  'one-step': '#e0872b',
  stream: '#3aa565',
  sync: '#8a8a8a',
  areal: '#a05cc8',
};

function render(option: echarts.EChartsCoreOption, width = WIDTH, height = HEIGHT): string {
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width, height });
  try {
    chart.setOption({ animation: false, backgroundColor: '#ffffff', textStyle: { fontFamily: 'Helvetica, Arial, sans-serif' }, ...option });
    return chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
}

function title(text: string, subtext?: string): echarts.EChartsCoreOption['title'] {
  return { text, subtext, left: 'center', textStyle: { fontSize: 15 }, subtextStyle: { fontSize: 11 } };
}

function label(results: SimulationResults, scenario: string): string {
  const s = results.scenarios.find((x) => x.name === scenario);
  return s ? `${s.paperModel ?? s.model} (${s.name})` : scenario;
}

function throughputCharts(results: SimulationResults): Chart[] {
  const charts: Chart[] = [];
  const points = orderedPoints(results);
  for (const s of results.scenarios) {
    const mine = points.filter((p) => p.scenario === s.name);
    if (mine.length === 0) continue;
    const systems = systemsIn(mine.flatMap((p) => [...p.bySystem.values()]));
    const gpus = mine.map((p) => String(p.gpus));
    charts.push({
      file: `throughput-${s.name}.svg`,
      svg: render({
        title: title(`${label(results, s.name)}: training throughput`, 'tokens/s (prompt + response) after the warm-up steps'),
        legend: { top: 62 },
        grid: { top: 105, left: 80, right: 30, bottom: 50 },
        xAxis: { type: 'category', data: gpus, name: 'GPUs', nameLocation: 'middle', nameGap: 30 },
        yAxis: { type: 'value', name: 'tokens/s' },
        series: systems.map((sys) => ({
          name: sys,
          type: 'bar',
          barMaxWidth: 48,
          itemStyle: { color: SYSTEM_COLOURS[sys] },
          data: mine.map((p) => Math.round(p.bySystem.get(sys)?.throughput.tokensPerS ?? 0)),
        })),
      }),
    });
    if (!systems.includes('laminar') || systems.length < 2) continue;
    const others = systems.filter((x) => x !== 'laminar');
    charts.push({
      file: `speedup-${s.name}.svg`,
      svg: render({
        title: title(`${label(results, s.name)}: laminar's speedup`, 'throughput(laminar) / throughput(system) at the same cluster size'),
        legend: { top: 62 },
        grid: { top: 105, left: 70, right: 30, bottom: 50 },
        xAxis: { type: 'category', data: gpus, name: 'GPUs', nameLocation: 'middle', nameGap: 30 },
        yAxis: { type: 'value', name: 'speedup (×)' },
        series: others.map((sys) => ({
          name: `÷ ${sys}`,
          type: 'line',
          symbolSize: 8,
          itemStyle: { color: SYSTEM_COLOURS[sys] },
          data: mine.map((p) => {
            const l = p.bySystem.get('laminar')?.throughput.tokensPerS;
            const b = p.bySystem.get(sys)?.throughput.tokensPerS;
            return l !== undefined && b !== undefined && b > 0 ? Number((l / b).toFixed(3)) : null;
          }),
          markLine:
            sys === others[0]
              ? { silent: true, symbol: 'none', lineStyle: { color: '#444', type: 'dashed' }, data: [{ yAxis: 1 }], label: { show: false } }
              : undefined,
        })),
      }),
    });
  }
  return charts;
}

function comparisonChart(results: SimulationResults): Chart | null {
  const rows = results.comparison.filter((r) => r.ratio !== null);
  if (rows.length === 0) return null;
  const ids = rows.map((r) => r.id).reverse();
  const point = (r: (typeof rows)[number]): [number, string] => [Number(r.ratio!.toFixed(3)), r.id];
  const maxRatio = Math.max(2, ...rows.map((r) => r.ratio!));
  return {
    file: 'paper-comparison.svg',
    svg: render(
      {
        title: title('Simulated ÷ paper', 'each validated figure; the band is ±15 %; bounds (≤, <) count as within when they hold'),
        legend: { top: 62 },
        grid: { top: 105, left: 250, right: 40, bottom: 50 },
        xAxis: { type: 'value', name: 'sim / paper', nameLocation: 'middle', nameGap: 30, min: 0, max: Math.ceil(maxRatio * 2) / 2 },
        yAxis: { type: 'category', data: ids, axisLabel: { fontSize: 11 } },
        series: [
          {
            name: 'within',
            type: 'scatter',
            symbolSize: 11,
            itemStyle: { color: '#3aa565' },
            data: rows.filter((r) => r.within === true).map(point),
            markArea: { silent: true, itemStyle: { color: 'rgba(47,111,223,0.12)' }, data: [[{ xAxis: 0.85 }, { xAxis: 1.15 }]] },
            markLine: { silent: true, symbol: 'none', lineStyle: { color: '#2f6fdf' }, data: [{ xAxis: 1 }], label: { show: false } },
          },
          { name: 'outside', type: 'scatter', symbolSize: 11, itemStyle: { color: '#d64545' }, data: rows.filter((r) => r.within === false).map(point) },
        ],
      },
      WIDTH,
      Math.max(HEIGHT, 140 + 26 * ids.length),
    ),
  };
}

function stalenessChart(results: SimulationResults): Chart | null {
  // Each scenario at the largest cluster size it ran, every system there.
  const points = orderedPoints(results);
  const largest = results.scenarios.map((s) => points.filter((p) => p.scenario === s.name).pop()).filter((p) => p !== undefined);
  const cats: string[] = [];
  const runs: ScenarioRunResult[] = [];
  for (const p of largest) {
    for (const r of p.bySystem.values()) {
      cats.push(`${label(results, p.scenario).split(' ')[0]} ${p.gpus} ${r.system}`);
      runs.push(r);
    }
  }
  if (runs.length === 0) return null;
  const series = (
    [
      ['inherent p50', (r: ScenarioRunResult) => r.staleness.inherent.p50, '#9ec1f7'],
      ['inherent p90', (r: ScenarioRunResult) => r.staleness.inherent.p90, '#4f86e0'],
      ['inherent max', (r: ScenarioRunResult) => r.staleness.inherent.max, '#1f4fa8'],
      ['consumption p50', (r: ScenarioRunResult) => r.staleness.consumption.p50, '#f5c08a'],
      ['consumption p90', (r: ScenarioRunResult) => r.staleness.consumption.p90, '#e0872b'],
      ['consumption max', (r: ScenarioRunResult) => r.staleness.consumption.max, '#a35710'],
    ] as const
  ).map(([name, of, color]) => ({ name, type: 'bar', itemStyle: { color }, data: runs.map(of) }));
  return {
    file: 'staleness.svg',
    svg: render(
      {
        title: title('Staleness (versions)', "inherent: at completion; consumption: at training; each scenario's largest cluster"),
        legend: { top: 62 },
        grid: { top: 110, left: 60, right: 30, bottom: 110 },
        xAxis: { type: 'category', data: cats, axisLabel: { rotate: 35, fontSize: 11 } },
        yAxis: { type: 'value', name: 'versions', minInterval: 1 },
        series,
      },
      Math.max(WIDTH, 70 * cats.length),
      HEIGHT + 60,
    ),
  };
}

function repackChart(results: SimulationResults): Chart | null {
  const pairs = orderedPoints(results)
    .map((p) => ({ p, on: p.bySystem.get('laminar'), off: p.bySystem.get('laminar-no-repack') }))
    .filter((x) => x.on !== undefined && x.off !== undefined);
  if (pairs.length === 0) return null;
  const cats = pairs.map(({ p }) => `${label(results, p.scenario).split(' ')[0]} ${p.gpus}`);
  const pct = (x: number): number => Number((x * 100).toFixed(1));
  return {
    file: 'repack.svg',
    svg: render({
      title: title('Repack: with against without', 'mean KV utilisation (bars, %) and generation throughput with ÷ without (line)'),
      legend: { top: 62 },
      grid: { top: 105, left: 60, right: 60, bottom: 50 },
      xAxis: { type: 'category', data: cats },
      yAxis: [
        { type: 'value', name: 'KV utilisation %', max: 100 },
        { type: 'value', name: 'gen ratio (×)', min: 0, splitLine: { show: false } },
      ],
      series: [
        {
          name: 'KV util, repack',
          type: 'bar',
          barMaxWidth: 60,
          itemStyle: { color: SYSTEM_COLOURS.laminar },
          data: pairs.map((x) => pct(x.on!.kvUtilisation)),
        },
        {
          name: 'KV util, no repack',
          type: 'bar',
          barMaxWidth: 60,
          itemStyle: { color: SYSTEM_COLOURS['laminar-no-repack'] },
          data: pairs.map((x) => pct(x.off!.kvUtilisation)),
        },
        {
          name: 'gen throughput ratio',
          type: 'line',
          yAxisIndex: 1,
          symbolSize: 8,
          itemStyle: { color: '#e0872b' },
          data: pairs.map((x) => (x.off!.generationTokensPerS > 0 ? Number((x.on!.generationTokensPerS / x.off!.generationTokensPerS).toFixed(3)) : null)),
        },
      ],
    }),
  };
}

const MODEL_COLOURS = ['#2f6fdf', '#e0872b', '#3aa565', '#8a8a8a', '#b04ad0'];

function broadcastChart(results: SimulationResults): Chart | null {
  const byModel = new Map<string, SimulationResults['scenarios'][number]>();
  for (const s of results.scenarios) if (!byModel.has(s.broadcast.model)) byModel.set(s.broadcast.model, s);
  if (byModel.size === 0) return null;
  const bound = paperFigure('sec4_2.broadcast_72b_127').value as number;
  const series: echarts.EChartsCoreOption[] = [...byModel.values()].map((s, i) => ({
    name: `${s.paperModel ?? s.model} (${(s.broadcast.bytes / 1e9).toFixed(1)} GB)`,
    type: 'line',
    symbolSize: 7,
    itemStyle: { color: MODEL_COLOURS[i % MODEL_COLOURS.length] },
    data: s.broadcast.points.map((p) => [p.relays, Number(p.seconds.toFixed(4))]),
  }));
  series.push({
    name: `paper: 72B to 127 relays < ${bound} s`,
    type: 'scatter',
    symbol: 'triangle',
    symbolSize: 14,
    itemStyle: { color: '#d03a3a' },
    data: [[128, bound]],
  });
  const any = [...byModel.values()][0]!.broadcast;
  return {
    file: 'broadcast.svg',
    svg: render({
      title: title(
        'Broadcast down the relay chain',
        `the relays' chunk model at ${any.bandwidthGBs} GB/s a hop, ${any.startupUs} µs a chunk; p relays with the master`,
      ),
      legend: { top: 62 },
      grid: { top: 105, left: 60, right: 30, bottom: 50 },
      xAxis: { type: 'log', logBase: 2, name: 'relays (p)', nameLocation: 'middle', nameGap: 28, min: 2, max: 128 },
      yAxis: { type: 'value', name: 'seconds', min: 0 },
      series,
    }),
  };
}

function failureCharts(results: SimulationResults): Chart[] {
  const charts: Chart[] = [];
  const done = new Set<string>();
  for (const r of results.runs) {
    const f = r.failures.find((x) => x.kind === 'machine');
    if (!f || !r.timeline || r.timeline.length === 0 || done.has(r.scenario)) continue;
    done.add(r.scenario);
    const mid = (w: { startS: number; endS: number }): number => Number(((w.startS + w.endS) / 2).toFixed(1));
    // Labels inside the plot, at the line's top, on either side of it: the two lines can be close.
    const marks = [
      { xAxis: Number(f.atS.toFixed(1)), name: 'machine killed', label: { position: 'insideEndTop' } },
      ...(f.backAtS === null ? [] : [{ xAxis: Number(f.backAtS.toFixed(1)), name: 'replacement joins', label: { position: 'insideEndBottom' } }]),
    ];
    charts.push({
      file: `failure-${r.scenario}.svg`,
      svg: render({
        title: title(
          `Machine failure: ${label(results, r.scenario)}, ${r.gpus} GPUs, ${r.system}`,
          `${f.rolloutsLost} of ${r.placement.rollouts} rollouts lost; tokens/s per ${(r.timeline[0]!.endS - r.timeline[0]!.startS).toFixed(0)} s window`,
        ),
        legend: { top: 62 },
        grid: { top: 105, left: 70, right: 70, bottom: 50 },
        xAxis: { type: 'value', name: 'virtual s', nameLocation: 'middle', nameGap: 28 },
        yAxis: [
          { type: 'value', name: 'generation tokens/s', min: 0 },
          { type: 'value', name: 'training tokens/s', min: 0, splitLine: { show: false } },
        ],
        series: [
          {
            name: 'generation',
            type: 'line',
            showSymbol: false,
            itemStyle: { color: SYSTEM_COLOURS.laminar },
            data: r.timeline.map((w) => [mid(w), Math.round(w.generationTokensPerS)]),
            markLine: { symbol: 'none', lineStyle: { color: '#d03a3a', type: 'dashed' }, label: { formatter: '{b}' }, data: marks },
          },
          // What §8.5's rows compare with: the same run without the failure, window by window.
          ...(r.timelineWithoutFailures
            ? [
                {
                  name: 'generation without the failure',
                  type: 'line',
                  showSymbol: false,
                  lineStyle: { type: 'dotted' },
                  itemStyle: { color: '#8c8c8c' },
                  data: r.timelineWithoutFailures.map((w) => [mid(w), Math.round(w.generationTokensPerS)]),
                },
              ]
            : []),
          {
            name: 'training',
            type: 'bar',
            yAxisIndex: 1,
            barMaxWidth: 6,
            itemStyle: { color: SYSTEM_COLOURS['one-step'] },
            data: r.timeline.map((w) => [mid(w), Math.round(w.trainingTokensPerS)]),
          },
        ],
      }),
    });
  }
  return charts;
}

/** Every chart the results can give (a chart whose data are absent is left out). */
export function renderCharts(results: SimulationResults): Chart[] {
  return [
    ...throughputCharts(results),
    comparisonChart(results),
    stalenessChart(results),
    repackChart(results),
    broadcastChart(results),
    ...failureCharts(results),
  ].filter((c): c is Chart => c !== null);
}
