/**
 * The staleness histograms of the last minute, beside the staleness chart (its percentiles come
 * from the same counts): inherent staleness (trajectories completed, by how many versions behind
 * the trainer's newest they were generated) and consumption staleness (trajectories trained on,
 * by how many versions behind the trainer they were, from the samplers' batch summaries). A bar
 * per value from 0, coloured by the version's age as in the rollout grid, the last one "N+" when
 * larger values were folded into it; under each, p50, p90, max and how many trajectories. Both
 * share the x range so that they read together; each has its own height scale (histogram.ts
 * draws them). Redrawn only when the
 * counts changed (the delta carries them only then, so the state keeps the same object).
 */
import type { StalenessCounts } from '../model.js';
import { ageColour } from './colours.js';
import { byId, setText } from './dom.js';
import { drawEmptyHistogram, drawHistogram } from './histogram.js';

interface Histogram {
  key: 'inherent' | 'consumption';
  title: string;
  /** What an empty window means for it. */
  empty: string;
  box: HTMLElement;
}

const behind = (label: string, v: number): string => `${label} ${v === 1 ? 'version' : 'versions'} behind`;

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
      if (staleness === null) drawEmptyHistogram(h.box, h.title, 'none', 'no staleness source (a standby manager, or no staleness watch)');
      else drawHistogram(h.box, { title: h.title, valueText: behind, colour: ageColour }, staleness[h.key], width, staleness.maxValue, h.empty);
    }
  }
}
