/**
 * The time series: uPlot charts over the manager's window (15 minutes of one point a second):
 * completions and tokens per second; versions (the trainer's, the rollouts' lowest and median,
 * relays holding the newest); staleness percentiles (inherent solid, consumption dashed); repack
 * moves, orphans handled and bytes broadcast; KV use. Charts are made at the first state and fed
 * with `setData` when the window changes; a series whose every value is null (no source) is
 * labelled so.
 */
import type { SeriesWindow } from '../model.js';
import { LINE_COLOURS } from './colours.js';
import { byId, el } from './dom.js';
import { bytes, clock, num } from './format.js';
import { RIGHT_SIDE, uPlotConstructor, type UPlot, type UPlotData, type UPlotOptions, type UPlotSeries } from './uplot.js';

interface Line {
  name: string;
  label: string;
  /** Drawn against the right axis. */
  right?: boolean;
  dash?: boolean;
  colour: string;
}

interface ChartSpec {
  id: string;
  title: string;
  left: string;
  right?: string;
  /** Formats the right axis' values (bytes). */
  rightBytes?: boolean;
  lines: Line[];
}

const [blue, green, pink, orange, purple, red, grey] = LINE_COLOURS;

export const CHARTS: readonly ChartSpec[] = [
  {
    id: 'throughput',
    title: 'Completions and tokens per second',
    left: 'completions/s',
    right: 'tokens/s',
    lines: [
      { name: 'completionsPerSecond', label: 'completions/s', colour: blue },
      { name: 'tokensPerSecond', label: 'tokens/s', right: true, colour: green },
    ],
  },
  {
    id: 'versions',
    title: 'Versions',
    left: 'version',
    right: 'relays',
    lines: [
      { name: 'trainerVersion', label: 'trainer', colour: blue },
      { name: 'rolloutVersionMin', label: 'rollouts lowest', colour: red },
      { name: 'rolloutVersionMedian', label: 'rollouts median', colour: orange },
      { name: 'relaysAtNewest', label: 'relays at newest', right: true, colour: grey },
    ],
  },
  {
    id: 'staleness',
    title: 'Staleness, last minute (inherent solid, consumption dashed)',
    left: 'versions behind',
    lines: [
      { name: 'inherentP50', label: 'inherent p50', colour: blue },
      { name: 'inherentP90', label: 'inherent p90', colour: orange },
      { name: 'inherentMax', label: 'inherent max', colour: red },
      { name: 'consumptionP50', label: 'consumption p50', dash: true, colour: blue },
      { name: 'consumptionP90', label: 'consumption p90', dash: true, colour: orange },
      { name: 'consumptionMax', label: 'consumption max', dash: true, colour: red },
    ],
  },
  {
    id: 'repack',
    title: 'Repack moves, orphans handled, bytes broadcast',
    left: 'per second',
    right: 'bytes/s',
    rightBytes: true,
    lines: [
      { name: 'repackMovesDone', label: 'moves done/s', colour: green },
      { name: 'repackMovesFailed', label: 'moves failed/s', colour: red },
      { name: 'orphansResumed', label: 'orphans resumed/s', colour: purple },
      { name: 'orphansReturned', label: 'orphans returned/s', colour: orange },
      { name: 'bytesBroadcastPerSecond', label: 'bytes broadcast/s', right: true, colour: pink },
    ],
  },
  {
    id: 'kv',
    title: 'KV use of the live rollouts',
    left: '%',
    lines: [
      { name: 'kvMean', label: 'mean', colour: blue },
      { name: 'kvP90', label: 'p90', colour: purple },
    ],
  },
];

const HEIGHT = 170;

interface Chart {
  spec: ChartSpec;
  plot: UPlot;
  box: HTMLElement;
}

export class SeriesView {
  private readonly root = byId('charts');
  private readonly charts: Chart[] = [];
  private shown: SeriesWindow | null = null;
  private failed = false;

  render(series: SeriesWindow): void {
    if (series === this.shown || this.failed) return;
    this.shown = series;
    if (this.charts.length === 0 && !this.create()) return;
    const t = series.t.map((ms) => ms / 1000);
    const index = new Map(series.names.map((name, k) => [name, k]));
    for (const chart of this.charts) {
      const columns = chart.spec.lines.map((line) => {
        const k = index.get(line.name);
        return k === undefined ? t.map(() => null) : series.values[k]!;
      });
      chart.plot.setData([t, ...columns] as UPlotData);
      chart.spec.lines.forEach((line, k) => {
        const noSource = columns[k]!.every((v) => v === null);
        const label = noSource ? `${line.label} (no source)` : line.label;
        const item = chart.box.querySelectorAll('.u-legend .u-series')[k + 1];
        const labelNode = item?.querySelector('.u-label');
        if (labelNode && labelNode.textContent !== label) labelNode.textContent = label;
      });
    }
  }

  private create(): boolean {
    let UPlotClass: ReturnType<typeof uPlotConstructor>;
    try {
      UPlotClass = uPlotConstructor();
    } catch (err) {
      this.failed = true;
      // Before the staleness histograms, which share the box and draw without uPlot.
      this.root.prepend(el('p', 'error', (err as Error).message));
      return false;
    }
    const width = this.chartWidth();
    for (const spec of CHARTS) {
      const box = el('div', 'chart');
      box.dataset.chart = spec.id;
      box.append(el('h3', '', spec.title));
      this.root.append(box);
      const plot = new UPlotClass(chartOptions(spec, width), [[], ...spec.lines.map(() => [])] as UPlotData, box);
      this.charts.push({ spec, plot, box });
    }
    new ResizeObserver(() => {
      const w = this.chartWidth();
      for (const chart of this.charts) if (chart.plot.width !== w) chart.plot.setSize({ width: w, height: HEIGHT });
    }).observe(this.root);
    return true;
  }

  /** Two charts to a row on a wide screen, one on a narrow one. */
  private chartWidth(): number {
    const total = this.root.clientWidth || 900;
    return Math.max(280, Math.floor(total >= 900 ? total / 2 - 16 : total - 8));
  }
}

function chartOptions(spec: ChartSpec, width: number): UPlotOptions {
  const series: UPlotSeries[] = [
    {},
    ...spec.lines.map((line): UPlotSeries => ({
      label: line.label,
      stroke: line.colour,
      width: 1.5,
      scale: line.right ? 'right' : 'y',
      ...(line.dash ? { dash: [6, 4] } : {}),
      value: (_u: UPlot, v: number | null) => (v === null ? '–' : line.right && spec.rightBytes ? bytes(v) : num(v, 2)),
    })),
  ];
  // The x axis as clock times only: uPlot's default adds the date under the first tick, and at
  // this width the two overlap. 15 minutes of points never cross a day that matters here.
  const axes: UPlotOptions['axes'] = [
    { space: 70, values: (_u: UPlot, ticks: number[]) => ticks.map((t) => clock(t * 1000)) },
    { label: spec.left, size: 56 },
  ];
  if (spec.right) {
    axes.push({
      scale: 'right',
      side: RIGHT_SIDE,
      label: spec.right,
      size: 64,
      grid: { show: false },
      ...(spec.rightBytes ? { values: (_u: UPlot, ticks: number[]) => ticks.map((v) => bytes(v)) } : {}),
    });
  }
  return {
    width,
    height: HEIGHT,
    scales: { x: { time: true }, y: { auto: true }, right: { auto: true } },
    series,
    axes,
    cursor: { drag: { x: false, y: false } },
    legend: { live: true },
  };
}
