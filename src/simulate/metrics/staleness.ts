/**
 * Staleness recorded per trajectory (docs/design/simulator.md, "Staleness and conservation"):
 * inherent = trainer version when the trajectory completes − the version it was generated with
 * (paper §6, Figure 10); consumption = trainer version when it is trained on − that version
 * (what the sampler's strategies see). Histograms as value → count, the shape sim-trainer
 * reports, and the same nearest-rank percentile (src/common/stats.ts), so the simulator and
 * sim-trainer give the same numbers for the same trajectories.
 */
import { histogramPercentile as percentile } from '../../common/stats.js';

export interface StalenessSummary {
  count: number;
  p50: number;
  p90: number;
  max: number;
  mean: number;
  histogram: Record<number, number>;
}

export class StalenessHistogram {
  private readonly histogram: Record<number, number> = {};
  private count = 0;
  private sum = 0;
  private maxSeen = 0;

  add(staleness: number): void {
    this.histogram[staleness] = (this.histogram[staleness] ?? 0) + 1;
    this.count++;
    this.sum += staleness;
    if (staleness > this.maxSeen) this.maxSeen = staleness;
  }

  summary(): StalenessSummary {
    return {
      count: this.count,
      p50: percentile(this.histogram, 0.5),
      p90: percentile(this.histogram, 0.9),
      max: this.count === 0 ? 0 : this.maxSeen,
      mean: this.count === 0 ? 0 : this.sum / this.count,
      histogram: { ...this.histogram },
    };
  }
}
