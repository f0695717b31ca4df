/**
 * The staleness histograms of the last minute, beside the staleness chart (its percentiles come
 * from the same counts): inherent staleness (trajectories completed, by how many versions behind
 * the trainer's newest they were generated) and consumption staleness (trajectories trained on,
 * by how many versions behind the trainer they were, from the samplers' batch summaries). A bar
 * per value from 0, coloured by the version's age as in the rollout grid, the last one "N+" when
 * larger values were folded into it; under each, p50, p90, max and how many trajectories. Both
 * share the x range so that they read together; each has its own height scale.
 *
 * Plain DOM: a bar is a div whose height is set from script (the CSSOM, which the page's
 * Content-Security-Policy allows; a `style` attribute in HTML it would not). Redrawn only when the
 * counts changed (the delta carries them only then, so the state keeps the same object).
 */
import type { StalenessCounts } from '../model.js';
import { percentileOfCounts } from '../series.js';
import { ageColour } from './colours.js';
import { byId, el, setText } from './dom.js';
import { count } from './format.js';

interface Histogram {
  key: 'inherent' | 'consumption';
  title: string;
  /** What an empty window means for it. */
  empty: string;
  box: HTMLElement;
}

/** Height of the tallest bar, in CSS pixels. */
const BAR_PX = 96;
/** Bars up to this many carry their count on top; x labels are thinned out to about this many. */
const LABELLED = 12;

export class StalenessView {
  private readonly heading = byId('staleness-heading');
  private readonly histograms: Histogram[] = [
    { key: 'inherent', title: 'inherent', empty: 'nothing completed in the last minute', box: byId('hist-inherent') },
    { key: 'consumption', title: 'consumption', empty: 'no batch trained on in the last minute', box: byId('hist-consumption') },
  ];
  /** What was drawn last (undefined: nothing yet). */
  private shown: StalenessCounts | null | undefined = undefined;

  render(staleness: StalenessCounts | null): void {
    if (staleness === this.shown) return;
    this.shown = staleness;
    const window = staleness === null ? 'last minute' : staleness.windowS === 60 ? 'last minute' : `last ${staleness.windowS} s`;
    setText(this.heading, `Staleness, ${window}: trajectories by versions behind`);
    // One x range for both: the larger of the two.
    const width = staleness === null ? 0 : Math.max(staleness.inherent.length, staleness.consumption.length);
    for (const h of this.histograms) {
      if (staleness === null) drawEmpty(h, 'none', 'no staleness source (a standby manager, or no staleness watch)');
      else draw(h, staleness[h.key], width, staleness.maxValue);
    }
  }
}

function drawEmpty(h: Histogram, state: 'none' | 'empty', why: string): void {
  h.box.dataset.state = state;
  h.box.dataset.total = '0';
  h.box.replaceChildren(el('div', 'hist-title', h.title), el('div', 'hist-empty', why));
}

function draw(h: Histogram, counts: readonly number[], width: number, maxValue: number): void {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) {
    drawEmpty(h, 'empty', h.empty);
    return;
  }
  const tallest = Math.max(...counts);
  // The value a count stands for: the last one is "that many or more" once the values reach it.
  const label = (v: number): string => (v >= maxValue ? `${v}+` : String(v));
  const every = Math.ceil(width / LABELLED);
  const plot = el('div', 'hist-plot');
  for (let v = 0; v < width; v++) {
    const n = counts[v] ?? 0;
    const column = el('div', 'hist-col');
    column.title = `${label(v)} ${v === 1 ? 'version' : 'versions'} behind: ${count(n)} ${n === 1 ? 'trajectory' : 'trajectories'}`;
    const bar = el('div', 'hist-bar');
    bar.dataset.value = String(v);
    bar.dataset.count = String(n);
    // A count above 0 stays visible, however small beside the tallest.
    bar.style.height = `${n === 0 ? 0 : Math.max(2, Math.round((n / tallest) * BAR_PX))}px`;
    bar.style.background = ageColour(v);
    const showX = v % every === 0 || v === width - 1;
    column.append(el('div', 'hist-n', width <= LABELLED && n > 0 ? count(n) : ''), bar, el('div', 'hist-x', showX ? label(v) : ''));
    plot.append(column);
  }
  const p = (q: number): string => {
    const value = percentileOfCounts(counts, q);
    return value === null ? '–' : label(value);
  };
  h.box.dataset.state = 'bars';
  h.box.dataset.total = String(total);
  h.box.replaceChildren(
    el('div', 'hist-title', h.title),
    plot,
    el('div', 'hist-stats', `p50 ${p(0.5)} · p90 ${p(0.9)} · max ${p(1)} · ${count(total)} ${total === 1 ? 'trajectory' : 'trajectories'}`),
  );
}
