/**
 * What the manager keeps for the dashboard between states (src/manager/dashboard/journal.ts and
 * series.ts): the event log's ring, the series' ring, rates of cumulative counts, staleness over
 * the last minute and its percentiles; and that states read from them travel as small deltas.
 */
import { describe, expect, it } from 'vitest';
import { diffStates } from '../../src/manager/dashboard/diff.js';
import { dashboardState } from '../../src/manager/dashboard/from-status.js';
import { EventJournal } from '../../src/manager/dashboard/journal.js';
import { applyDelta, type DashboardState } from '../../src/manager/dashboard/model.js';
import { CounterRate, SeriesRing, SlidingCounts, percentileOfCounts } from '../../src/manager/dashboard/series.js';
import type { ManagerStatus } from '../../src/manager/manager.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const codeOf = (f: () => unknown): string | undefined => {
  try {
    f();
  } catch (err) {
    return (err as { code?: string }).code;
  }
  return undefined;
};

const emptyStatus: ManagerStatus = {
  manager: 'm',
  leader: true,
  leaderId: 'm',
  job: 'j',
  epoch: null,
  master: null,
  chain: [],
  members: [],
  newest: [],
  rollouts: [],
  repack: { busy: [], orphansWaiting: 0, moves: { done: 0, failed: 0 }, orphans: { resumed: 0, completed: 0, returned: 0, lost: 0 } },
};

describe('event journal', () => {
  it('numbers events, keeps the newest up to its capacity, and goes on numbering after clear()', () => {
    let now = 1000;
    const journal = new EventJournal(3, () => now);
    for (const id of ['r1', 'r2', 'r3', 'r4']) {
      journal.record('relay-dead', id, 'declared dead (heartbeat)');
      now += 10;
    }
    expect(journal.latest().map((e) => [e.n, e.subject, e.t])).toEqual([
      [1, 'r2', 1010],
      [2, 'r3', 1020],
      [3, 'r4', 1030],
    ]);
    expect(journal.latest(2).map((e) => e.n)).toEqual([2, 3]);
    journal.clear();
    expect(journal.size).toBe(0);
    expect(journal.record('leader', 'm', 'took the job over').n).toBe(4);
  });

  it('refuses a capacity that is not a positive integer', () => {
    expect(codeOf(() => new EventJournal(0))).toBe(ErrorCodes.INVALID_ARG);
    expect(codeOf(() => new EventJournal(1.5))).toBe(ErrorCodes.INVALID_ARG);
  });
});

describe('series ring', () => {
  it('keeps the last points, makes a non-finite or missing value null, and refuses a time that does not increase', () => {
    const ring = new SeriesRing(['a', 'b'], 3);
    expect(ring.push(1000, { a: 1, b: 2 })).toBe(true);
    expect(ring.push(2000, { a: Number.NaN })).toBe(true);
    expect(ring.push(2000, { a: 5, b: 5 })).toBe(false);
    expect(ring.push(1500, { a: 5, b: 5 })).toBe(false);
    ring.push(3000, { a: Infinity, b: 4 });
    ring.push(4000, { a: 7, b: null });
    expect(ring.window()).toEqual({
      names: ['a', 'b'],
      t: [2000, 3000, 4000],
      values: [
        [null, null, 7],
        [null, 4, null],
      ],
    });
  });

  it('a window does not change with later points', () => {
    const ring = new SeriesRing(['a'], 2);
    ring.push(1, { a: 1 });
    const w = ring.window();
    ring.push(2, { a: 2 });
    ring.push(3, { a: 3 });
    expect(w).toEqual({ names: ['a'], t: [1], values: [[1]] });
  });

  it('refuses names that repeat and a capacity that is not a positive integer', () => {
    expect(codeOf(() => new SeriesRing(['a', 'a']))).toBe(ErrorCodes.INVALID_ARG);
    expect(codeOf(() => new SeriesRing(['a'], 0))).toBe(ErrorCodes.INVALID_ARG);
  });
});

describe('states read from the journal and the ring travel as appended points and events', () => {
  it('a full ring moving on is one point and its drop, and the page ends with the same state', () => {
    const ring = new SeriesRing(['completionsPerSecond', 'trainerVersion'], 5);
    let now = 10_000;
    const journal = new EventJournal(4, () => now);
    for (let i = 0; i < 5; i++) ring.push((now += 1000), { completionsPerSecond: i, trainerVersion: 1 });
    journal.record('plan', 'epoch 1', 'chain of 3 relays (join)');
    const state = (seq: number): DashboardState => dashboardState(emptyStatus, { seq, at: now, series: ring.window(), events: journal.latest() });
    let page = JSON.parse(JSON.stringify(state(1))) as DashboardState;
    let prev = state(1);
    for (let seq = 2; seq <= 8; seq++) {
      ring.push((now += 1000), { completionsPerSecond: seq * 10, trainerVersion: seq });
      if (seq % 2 === 0) journal.record('relay-dead', `r${seq}`, 'declared dead (report)');
      const next = state(seq);
      const delta = diffStates(prev, next);
      expect(delta.series).toBeUndefined();
      expect(delta.points?.t).toEqual([now]);
      expect(delta.points?.dropPoints).toBe(1);
      if (seq % 2 === 0) expect(delta.events?.added.map((e) => e.subject)).toEqual([`r${seq}`]);
      else expect(delta.events).toBeUndefined();
      page = applyDelta(page, JSON.parse(JSON.stringify(delta)) as typeof delta);
      expect(page).toEqual(next);
      prev = next;
    }
    expect(page.events).toHaveLength(4);
  });
});

describe('counter rate', () => {
  it('is the per-second rate between samples; null at the first, after a restart of the count, and for an unknown count', () => {
    const rate = new CounterRate();
    expect(rate.sample(1000, 10)).toBeNull();
    expect(rate.sample(3000, 30)).toBe(10);
    expect(rate.sample(3000, 40)).toBeNull();
    expect(rate.sample(4000, 5)).toBeNull();
    expect(rate.sample(4500, 10)).toBe(10);
    expect(rate.sample(5000, null)).toBeNull();
    expect(rate.sample(6000, 20)).toBeNull();
    expect(rate.sample(7000, 20)).toBe(0);
  });
});

describe('staleness over the last minute', () => {
  it('counts values in the window, forgets older buckets, and folds values past the largest into it', () => {
    const counts = new SlidingCounts(60_000, 1000, 8);
    counts.add(0, 1);
    counts.add(500, 2, 3);
    counts.add(30_000, 20);
    counts.add(30_000, -1);
    expect(counts.counts(30_000)).toEqual([1, 1, 3, 0, 0, 0, 0, 0, 1]);
    // At 60.999 s the bucket of 0-1 s still overlaps the last minute; at 61 s it ended 60 s ago: gone.
    expect(counts.counts(60_999)).toEqual([1, 1, 3, 0, 0, 0, 0, 0, 1]);
    expect(counts.counts(61_000)).toEqual([1, 0, 0, 0, 0, 0, 0, 0, 1]);
    expect(counts.counts(91_000)).toEqual([]);
  });

  it('percentiles by nearest rank: p50, p90, max, min; none for no values', () => {
    const counts = [2, 5, 2, 0, 1]; // 0,0,1,1,1,1,1,2,2,4
    expect(percentileOfCounts(counts, 0.5)).toBe(1);
    expect(percentileOfCounts(counts, 0.9)).toBe(2);
    expect(percentileOfCounts(counts, 1)).toBe(4);
    expect(percentileOfCounts(counts, 0)).toBe(0);
    expect(percentileOfCounts([], 0.5)).toBeNull();
    expect(percentileOfCounts([0, 0], 0.5)).toBeNull();
    expect(codeOf(() => percentileOfCounts(counts, 1.5))).toBe(ErrorCodes.INVALID_ARG);
    expect(codeOf(() => percentileOfCounts(counts, Number.NaN))).toBe(ErrorCodes.INVALID_ARG);
  });
});
