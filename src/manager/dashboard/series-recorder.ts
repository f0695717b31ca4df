/**
 * The dashboard's time series as the leading manager records them: once a second, whether or
 * not a page is open (so that a page opened late has the last 15 minutes), one point made of
 * - aggregates of the status: tokens per second of the live rollouts, their KV use (mean and
 *   p90, in percent), their lowest and median weight version, the trainer's version (the newest
 *   announced), the relays of the chain holding the newest version of every model;
 * - per-second rates of cumulative counts: repack moves done and failed, orphans resumed and
 *   returned (the status' counts), chunk bytes the relays received (their heartbeats), and
 *   trajectories completed (the staleness watch, through `completed()`);
 * - inherent and consumption staleness over the last minute: p50, p90 and the largest value
 *   (the staleness watch hands each value in through `inherent()` and `consumption()`).
 *
 * The counts those percentiles are taken from are the dashboard's staleness histograms too
 * (`stalenessCounts(t)`, model.ts `staleness`).
 *
 * A series whose source is missing (no staleness watch, no rollouts, no value in the last
 * minute) is null at that point: the page draws a gap. O(members) a second. Cleared when
 * leadership ends, like the registry: the next leader's series are its own.
 */
import type { ManagerStatus } from '../manager-status.js';
import type { StalenessListener } from '../staleness/staleness-watch.js';
import type { SeriesWindow, StalenessCounts } from './model.js';
import { CounterRate, SERIES_POINTS, SeriesRing, SlidingCounts, percentileOfCounts } from './series.js';

/** The series of the model (versions 1 and 2), in the order of the window's `values`. */
export const SERIES_NAMES = [
  'completionsPerSecond',
  'tokensPerSecond',
  'trainerVersion',
  'rolloutVersionMin',
  'rolloutVersionMedian',
  'relaysAtNewest',
  'inherentP50',
  'inherentP90',
  'inherentMax',
  'consumptionP50',
  'consumptionP90',
  'consumptionMax',
  'repackMovesDone',
  'repackMovesFailed',
  'orphansResumed',
  'orphansReturned',
  'bytesBroadcastPerSecond',
  'kvMean',
  'kvP90',
] as const;
export type SeriesName = (typeof SERIES_NAMES)[number];
export type SeriesPoint = Record<SeriesName, number | null>;

/** Turns per trajectory completed over a window, as counts (counts[n]: trajectories of n turns). */
export interface TurnCounts {
  counts: number[];
  windowS: number;
  maxValue: number;
}

/** Counts the status does not carry, read by the manager at each point. */
export interface RecorderCounts {
  /** Chunk bytes the relays received while this manager led (cumulative); null: no relay reports it. */
  bytesReceived: number | null;
  /** Whether a staleness watch follows the buffer (without one, completions and staleness have no source). */
  watching: boolean;
}

export interface SeriesRecorderOptions {
  /** Points kept (default 900: 15 minutes of one a second). */
  capacity?: number;
  /** The window of the staleness percentiles (default one minute). */
  stalenessWindowMs?: number;
}

export class SeriesRecorder implements StalenessListener {
  private readonly ring: SeriesRing;
  private readonly inherentCounts: SlidingCounts;
  private readonly consumptionCounts: SlidingCounts;
  /** Generated turns per trajectory completed (the actions panel's histogram, model.ts `ActionsPanel`). */
  private readonly turnCounts: SlidingCounts;
  private readonly rates = {
    completions: new CounterRate(),
    movesDone: new CounterRate(),
    movesFailed: new CounterRate(),
    orphansResumed: new CounterRate(),
    orphansReturned: new CounterRate(),
    bytes: new CounterRate(),
  };
  private completions = 0;

  constructor(
    options: SeriesRecorderOptions = {},
    private readonly clock: () => number = Date.now,
  ) {
    this.ring = new SeriesRing(SERIES_NAMES, options.capacity ?? SERIES_POINTS);
    const windowMs = options.stalenessWindowMs ?? 60_000;
    this.inherentCounts = new SlidingCounts(windowMs);
    this.consumptionCounts = new SlidingCounts(windowMs);
    this.turnCounts = new SlidingCounts(windowMs);
  }

  // ---- what the staleness watch hands in (StalenessListener) ----------------------------------

  completed(): void {
    this.completions++;
  }

  inherent(value: number): void {
    this.inherentCounts.add(this.clock(), value);
  }

  consumption(value: number, count: number): void {
    this.consumptionCounts.add(this.clock(), value, count);
  }

  turns(turns: number): void {
    this.turnCounts.add(this.clock(), turns);
  }

  // ---- points ---------------------------------------------------------------------------------

  /** The point at time `t` (ms) from the status and the counts; false when `t` does not follow the last point (a clock stepped back). */
  sample(t: number, status: ManagerStatus, counts: RecorderCounts): boolean {
    return this.ring.push(t, this.point(t, status, counts));
  }

  /** The point `sample` would append (rates advance: call it once per point). */
  point(t: number, status: ManagerStatus, counts: RecorderCounts): SeriesPoint {
    const live = status.rollouts.filter((r) => r.health !== 'dead');
    const versions = live.flatMap((r) => (typeof r.weightVersion === 'number' ? [r.weightVersion] : [])).sort((a, b) => a - b);
    const kv = live.flatMap((r) => (typeof r.kvUsed === 'number' ? [r.kvUsed * 100] : [])).sort((a, b) => a - b);
    const tokens = live.flatMap((r) => (typeof r.tokensPerSecond === 'number' ? [r.tokensPerSecond] : []));
    const inherent = counts.watching ? this.inherentCounts.counts(t) : [];
    const consumption = counts.watching ? this.consumptionCounts.counts(t) : [];
    const { moves, orphans } = status.repack;
    return {
      completionsPerSecond: roundRate(this.rates.completions.sample(t, counts.watching ? this.completions : null)),
      tokensPerSecond:
        tokens.length > 0
          ? round(
              tokens.reduce((a, b) => a + b, 0),
              1,
            )
          : null,
      trainerVersion: status.newest.length > 0 ? Math.max(...status.newest.map((h) => h.version)) : null,
      rolloutVersionMin: versions.length > 0 ? versions[0]! : null,
      rolloutVersionMedian: nearestRank(versions, 0.5),
      relaysAtNewest: status.newest.length > 0 ? status.chain.filter((r) => r.health !== 'dead' && r.progress >= 1).length : null,
      inherentP50: percentileOfCounts(inherent, 0.5),
      inherentP90: percentileOfCounts(inherent, 0.9),
      inherentMax: percentileOfCounts(inherent, 1),
      consumptionP50: percentileOfCounts(consumption, 0.5),
      consumptionP90: percentileOfCounts(consumption, 0.9),
      consumptionMax: percentileOfCounts(consumption, 1),
      repackMovesDone: roundRate(this.rates.movesDone.sample(t, moves.done)),
      repackMovesFailed: roundRate(this.rates.movesFailed.sample(t, moves.failed)),
      orphansResumed: roundRate(this.rates.orphansResumed.sample(t, orphans.resumed)),
      orphansReturned: roundRate(this.rates.orphansReturned.sample(t, orphans.returned)),
      bytesBroadcastPerSecond: roundRate(this.rates.bytes.sample(t, counts.bytesReceived), 0),
      kvMean: kv.length > 0 ? round(kv.reduce((a, b) => a + b, 0) / kv.length, 1) : null,
      kvP90: kv.length > 0 ? round(nearestRank(kv, 0.9)!, 1) : null,
    };
  }

  /**
   * The staleness values of the window ending at `t` (ms, the clock the values are handed in
   * with), as counts: the histograms the page draws, from the same counts as the percentile
   * series. Empty arrays when none; cleared with the series when leadership ends. Whether there is
   * a staleness source at all is the manager's to say (null in the state).
   */
  stalenessCounts(t: number): StalenessCounts {
    const window = this.inherentCounts;
    return {
      inherent: window.counts(t),
      consumption: this.consumptionCounts.counts(t),
      windowS: window.windowMs / 1000,
      maxValue: window.maxValue,
    };
  }

  /** Turns per trajectory completed in the window ending at `t` (the actions panel's), as counts. */
  turnsCounts(t: number): TurnCounts {
    return { counts: this.turnCounts.counts(t), windowS: this.turnCounts.windowMs / 1000, maxValue: this.turnCounts.maxValue };
  }

  /** The window as a state holds it (a copy). */
  window(): SeriesWindow {
    return this.ring.window();
  }

  get length(): number {
    return this.ring.length;
  }

  /** Leadership ended: points, staleness values and the rates' bases start over. */
  clear(): void {
    this.ring.clear();
    this.inherentCounts.clear();
    this.consumptionCounts.clear();
    this.turnCounts.clear();
    for (const rate of Object.values(this.rates)) rate.reset();
  }
}

/** The q-quantile of sorted values by nearest rank; null when there are none. */
function nearestRank(sorted: readonly number[], q: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

const round = (value: number, digits: number): number => {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
};

/** Rates are sent with two decimals (bytes: whole): the page shows no more, and the deltas stay short. */
const roundRate = (rate: number | null, digits = 2): number | null => (rate === null ? null : round(rate, digits));
