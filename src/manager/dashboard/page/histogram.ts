/**
 * A histogram of small integers as counts (counts[v]: how many times v), drawn in plain DOM: a
 * bar per value from 0 to `width - 1`, the last one "N+" when larger values were folded into it
 * (v >= maxValue); under it, p50, p90, max and the total. A bar is a div whose height is set from
 * script (the CSSOM, which the page's Content-Security-Policy allows; a `style` attribute in HTML
 * it would not). Used by the staleness histograms and the actions panel's turns per trajectory.
 */
import { percentileOfCounts } from '../series.js';
import { el } from './dom.js';
import { count } from './format.js';

/** Height of the tallest bar, in CSS pixels. */
const BAR_PX = 96;
/** Bars up to this many carry their count on top; x labels are thinned out to about this many. */
const LABELLED = 12;

export interface HistogramStyle {
  title: string;
  /** What one value means, for a bar's tooltip: (value label, value) => "3 versions behind". */
  valueText: (label: string, v: number) => string;
  /** A bar's colour for value v. */
  colour: (v: number) => string;
}

/** Draws `why` instead of bars; `state` says why in `data-state` ("none": no source, "empty": nothing in the window). */
export function drawEmptyHistogram(box: HTMLElement, title: string, state: 'none' | 'empty', why: string): void {
  box.dataset.state = state;
  box.dataset.total = '0';
  box.replaceChildren(el('div', 'hist-title', title), el('div', 'hist-empty', why));
}

/** Draws the bars of `counts` (the `empty` text when they sum to 0) over `width` values. */
export function drawHistogram(box: HTMLElement, style: HistogramStyle, counts: readonly number[], width: number, maxValue: number, empty: string): void {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) {
    drawEmptyHistogram(box, style.title, 'empty', empty);
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
    column.title = `${style.valueText(label(v), v)}: ${count(n)} ${n === 1 ? 'trajectory' : 'trajectories'}`;
    const bar = el('div', 'hist-bar');
    bar.dataset.value = String(v);
    bar.dataset.count = String(n);
    // A count above 0 stays visible, however small beside the tallest.
    bar.style.height = `${n === 0 ? 0 : Math.max(2, Math.round((n / tallest) * BAR_PX))}px`;
    bar.style.background = style.colour(v);
    const showX = v % every === 0 || v === width - 1;
    column.append(el('div', 'hist-n', width <= LABELLED && n > 0 ? count(n) : ''), bar, el('div', 'hist-x', showX ? label(v) : ''));
    plot.append(column);
  }
  const p = (q: number): string => {
    const value = percentileOfCounts(counts, q);
    return value === null ? '–' : label(value);
  };
  box.dataset.state = 'bars';
  box.dataset.total = String(total);
  box.replaceChildren(
    el('div', 'hist-title', style.title),
    plot,
    el('div', 'hist-stats', `p50 ${p(0.5)} · p90 ${p(0.9)} · max ${p(1)} · ${count(total)} ${total === 1 ? 'trajectory' : 'trajectories'}`),
  );
}
