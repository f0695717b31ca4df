/**
 * The trainer's version over time, to measure the *inherent* staleness of a trajectory (the
 * paper's Figure 10): the trainer's version when the trajectory completed minus the version that
 * generated it. Consumption staleness (the version trained at minus the generating version) adds
 * the time the trajectory then waited in the buffer; inherent staleness measures generation
 * latency against the trainer's pace alone.
 *
 * A record carries `completedAt` (epoch ms, the rollout host's clock); the trainer knows when each
 * of its versions became current. Across hosts the figure is as good as their clock sync. The
 * same definition as python/examples/grpo_digits/staleness.py.
 */
import { histogramPercentile } from '../../common/stats.js';

export interface StalenessStats {
  /** Nearest-rank median. */
  p50: number;
  min: number;
  max: number;
  mean: number;
  /** staleness value -> trajectories. */
  histogram: Record<number, number>;
}

export class VersionClock {
  private readonly times: number[] = [];
  private readonly versions: number[] = [];

  /** `version` became the trainer's at `atMs`; a version not newer than the last is ignored. */
  published(version: number, atMs: number): void {
    const last = this.versions.length - 1;
    if (last >= 0 && version <= this.versions[last]!) return;
    this.versions.push(version);
    this.times.push(last >= 0 ? Math.max(atMs, this.times[last]!) : atMs);
  }

  /**
   * The trainer's version at `atMs`: the newest that became current at or before it. Before the
   * first of this run (a record left by an earlier run), the first: what came before is unknown.
   */
  versionAt(atMs: number): number | undefined {
    if (this.versions.length === 0) return undefined;
    let lo = 0;
    let hi = this.times.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.times[mid]! <= atMs) lo = mid + 1;
      else hi = mid;
    }
    return this.versions[Math.max(lo - 1, 0)];
  }

  /**
   * Inherent staleness of each trajectory, summarised. Never below 0: an engine can see a version
   * a few milliseconds before the trainer's publish returns.
   */
  inherent(items: readonly { completedAt: number; weightVersion: number }[]): StalenessStats {
    const histogram: Record<number, number> = {};
    let min = Infinity;
    let max = 0;
    let sum = 0;
    for (const item of items) {
      const value = Math.max((this.versionAt(item.completedAt) ?? item.weightVersion) - item.weightVersion, 0);
      histogram[value] = (histogram[value] ?? 0) + 1;
      min = Math.min(min, value);
      max = Math.max(max, value);
      sum += value;
    }
    if (items.length === 0) return { p50: 0, min: 0, max: 0, mean: 0, histogram };
    return { p50: histogramPercentile(histogram, 0.5), min, max, mean: sum / items.length, histogram };
  }

  /** Versions remembered (one per publish of this run). */
  get size(): number {
    return this.versions.length;
  }
}
