/**
 * Each kind's arrival rate (actions per second), from a cumulative count of the actions that
 * reached its queue, sampled once per supervisor round: the count's rise over a sliding window
 * divided by the time the window spans. The scheduler adds the arrivals expected within its
 * horizon to the queue (act-model.ts), so a kind that keeps receiving work keeps its workers
 * (and gets them) even when its queue happens to be empty at the moment it is sampled, instead
 * of scaling up only once work waits.
 *
 * Pure: samples in, rates out. The count may go back (a consumer deleted and created again, a
 * stream purged): the kind's history then starts over from that sample.
 */

interface Sample {
  atMs: number;
  count: number;
}

export const DEFAULT_RATE_WINDOW_MS = 10_000;

export class ArrivalRates {
  private readonly samples = new Map<string, Sample[]>();

  /** `windowMs`: how far back the rate looks; longer is steadier, shorter follows bursts sooner. */
  constructor(private readonly windowMs = DEFAULT_RATE_WINDOW_MS) {}

  /**
   * Records that `count` actions of `kind` had arrived in all by `atMs`, and returns the kind's
   * rate over the window: 0 until two samples span some time.
   */
  observe(kind: string, atMs: number, count: number): number {
    let list = this.samples.get(kind) ?? [];
    const last = list.at(-1);
    if (last && (count < last.count || atMs < last.atMs)) list = [];
    list.push({ atMs, count });
    // Keep one sample at or before the window's start, so that the span covers the whole window.
    while (list.length > 2 && list[1]!.atMs <= atMs - this.windowMs) list.shift();
    this.samples.set(kind, list);
    const first = list[0]!;
    const spanMs = atMs - first.atMs;
    return spanMs > 0 ? ((count - first.count) * 1000) / spanMs : 0;
  }
}
