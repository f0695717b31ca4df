/**
 * The dashboard's time series, as the manager keeps them between pages: a ring of points, one a
 * second (SeriesRing, read into each state as model.ts `series`), and what the recorder derives
 * its points from: per-second rates of cumulative counts that can start over (CounterRate), and
 * small integer values such as staleness over the last minute, with their percentiles
 * (SlidingCounts, percentileOfCounts). Pure: every time is a parameter.
 */
import { ErrorCodes } from '../../common/error-codes.js';
import { InvalidInputError } from '../../common/errors.js';
import { histogramPercentile } from '../../common/stats.js';
import type { SeriesWindow } from './model.js';

/** Points kept: 15 minutes of one a second. */
export const SERIES_POINTS = 900;

const positiveInteger = (name: string, value: number): number => {
  if (!Number.isSafeInteger(value) || value <= 0) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${name} must be a positive integer, not ${value}`);
  return value;
};

/** The last `capacity` points of a fixed set of series. */
export class SeriesRing {
  private readonly t: number[] = [];
  private readonly values: (number | null)[][];

  constructor(
    readonly names: readonly string[],
    readonly capacity = SERIES_POINTS,
  ) {
    positiveInteger('series capacity', capacity);
    if (new Set(names).size !== names.length) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `series names repeat: ${names.join(', ')}`);
    this.values = names.map(() => []);
  }

  /**
   * Appends a point; a series absent from `point`, or not a finite number, is null there (JSON
   * has no NaN). A time not after the last point's is refused (false): the window's times must
   * increase, or the next delta would send the whole window (a clock stepped back).
   */
  push(t: number, point: Readonly<Record<string, number | null | undefined>>): boolean {
    if (!Number.isFinite(t) || (this.t.length > 0 && t <= this.t[this.t.length - 1]!)) return false;
    this.t.push(t);
    this.names.forEach((name, k) => {
      const v = point[name];
      this.values[k]!.push(typeof v === 'number' && Number.isFinite(v) ? v : null);
    });
    if (this.t.length > this.capacity) {
      this.t.shift();
      for (const column of this.values) column.shift();
    }
    return true;
  }

  /** The window as a state holds it: copies, so that the state does not change with the next push. */
  window(): SeriesWindow {
    return { names: [...this.names], t: [...this.t], values: this.values.map((column) => [...column]) };
  }

  get length(): number {
    return this.t.length;
  }

  clear(): void {
    this.t.length = 0;
    for (const column of this.values) column.length = 0;
  }
}

/** The per-second rate of a cumulative count, from one sample to the next. */
export class CounterRate {
  private last: { t: number; value: number } | null = null;

  /**
   * The rate since the previous sample: null for the first one, when the time did not move on,
   * when the count is unknown (null), and when it went down (its source started over: a new
   * leader's counts, a relay restarted); the sample is then the new base.
   */
  sample(t: number, value: number | null): number | null {
    const last = this.last;
    if (value === null || !Number.isFinite(value)) {
      this.last = null;
      return null;
    }
    this.last = { t, value };
    if (!last || t <= last.t || value < last.value) return null;
    return ((value - last.value) * 1000) / (t - last.t);
  }

  reset(): void {
    this.last = null;
  }
}

/**
 * Counts of small non-negative integers (staleness values) seen over a sliding window, kept in
 * buckets of `bucketMs`: counts(t) sums the buckets that end after t - windowMs. Values above
 * `maxValue` count as `maxValue` (the last count is "that many or more"); negative ones as 0.
 */
export class SlidingCounts {
  private readonly buckets = new Map<number, number[]>();

  constructor(
    readonly windowMs = 60_000,
    readonly bucketMs = 1000,
    readonly maxValue = 64,
  ) {
    positiveInteger('window', windowMs);
    positiveInteger('bucket', bucketMs);
    positiveInteger('largest value', maxValue);
  }

  add(t: number, value: number, count = 1): void {
    const v = Math.min(this.maxValue, Math.max(0, Math.round(value)));
    const key = Math.floor(t / this.bucketMs);
    let bucket = this.buckets.get(key);
    if (!bucket) this.buckets.set(key, (bucket = []));
    bucket[v] = (bucket[v] ?? 0) + count;
    this.expire(t);
  }

  /** counts[v]: how many times v was seen within the window ending at t; no trailing zeros. */
  counts(t: number): number[] {
    this.expire(t);
    const out: number[] = [];
    for (const bucket of this.buckets.values()) {
      bucket.forEach((n, v) => (out[v] = (out[v] ?? 0) + n));
    }
    for (let v = 0; v < out.length; v++) out[v] ??= 0;
    return out;
  }

  clear(): void {
    this.buckets.clear();
  }

  /** Drops the buckets that ended at or before t - windowMs (bucket k covers [k, k + 1) × bucketMs). */
  private expire(t: number): void {
    for (const key of this.buckets.keys()) if ((key + 1) * this.bucketMs <= t - this.windowMs) this.buckets.delete(key);
  }
}

/**
 * The q-quantile (0 ≤ q ≤ 1) of values given as counts (counts[v]: how many times v), by nearest
 * rank: the smallest v with at least ceil(q · total) values at or below it (q = 1: the largest
 * value seen, q = 0: the smallest). Null when there are none.
 */
export function percentileOfCounts(counts: readonly number[], q: number): number | null {
  if (!(q >= 0 && q <= 1)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `a quantile is between 0 and 1, not ${q}`);
  if (!counts.some((n) => n > 0)) return null;
  return histogramPercentile(Object.fromEntries(counts.map((n, v) => [v, n])), q);
}
