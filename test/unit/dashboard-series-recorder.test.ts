/**
 * The dashboard's series recorder: the 1 Hz point from a manager's status (aggregates of the
 * rollouts and the chain), per-second rates of cumulative counts (repack moves, orphans, bytes
 * broadcast, completions), staleness percentiles over the last minute as the staleness watch
 * hands values in, the counts they come from (the page's staleness histograms), gaps (null) where
 * a source is missing, and clear() when leadership ends.
 */
import { describe, expect, it } from 'vitest';
import { SERIES_NAMES, SeriesRecorder, type SeriesPoint } from '../../src/manager/dashboard/series-recorder.js';
import { percentileOfCounts } from '../../src/manager/dashboard/series.js';
import type { ManagerStatus } from '../../src/manager/manager.js';

const chainEntry = (id: string, health: 'alive' | 'dead', progress: number): ManagerStatus['chain'][number] => ({
  position: 0,
  id,
  address: '10.0.0.1:13337',
  host: 'h',
  labels: {},
  health,
  heardMsAgo: 0,
  holds: [],
  receiving: [],
  progress,
  demoted: false,
  bytes: { sent: 0, received: 0 },
});

function status(): ManagerStatus {
  return {
    manager: 'm',
    leader: true,
    leaderId: 'm',
    job: 'j',
    epoch: 3,
    master: 'r0',
    chain: [chainEntry('r0', 'alive', 1), chainEntry('r1', 'alive', 0.5), chainEntry('r2', 'alive', 1)],
    members: [],
    newest: [
      { model: 'a', version: 7 },
      { model: 'b', version: 9 },
    ],
    rollouts: [
      // KV 10, 20, ..., 100 %; versions 5..9 twice; 10 tokens/s each; one dead rollout left out of everything.
      ...Array.from({ length: 10 }, (_, i) => ({
        id: `ro${i}`,
        host: 'h',
        health: 'alive' as const,
        kvUsed: (i + 1) / 10,
        weightVersion: 5 + (i % 5),
        tokensPerSecond: 10,
      })),
      { id: 'gone', host: 'h', health: 'dead' as const, kvUsed: 1, weightVersion: 0, tokensPerSecond: 1000 },
      // Registered, nothing reported yet.
      { id: 'new', host: 'h', health: 'alive' as const },
    ],
    repack: { busy: [], orphansWaiting: 0, moves: { done: 10, failed: 2 }, orphans: { resumed: 4, completed: 0, returned: 1, lost: 0 } },
  };
}

describe('the series recorder', () => {
  it('aggregates the status into a point, and rates of the cumulative counts from the second point on', () => {
    let now = 1_000_000;
    const recorder = new SeriesRecorder({}, () => now);
    const s = status();
    const first = recorder.point(now, s, { bytesReceived: 1_000, watching: true });
    expect(first).toMatchObject({
      tokensPerSecond: 100,
      trainerVersion: 9,
      rolloutVersionMin: 5,
      rolloutVersionMedian: 7,
      relaysAtNewest: 2,
      kvMean: 55,
      kvP90: 90,
      // Rates need two samples.
      completionsPerSecond: null,
      repackMovesDone: null,
      bytesBroadcastPerSecond: null,
      // No staleness values yet.
      inherentP50: null,
      consumptionMax: null,
    });
    expect(Object.keys(first).sort()).toEqual([...SERIES_NAMES].sort());

    for (let i = 0; i < 6; i++) recorder.completed();
    s.repack.moves.done += 4;
    s.repack.orphans.resumed += 2;
    now += 2000;
    const second = recorder.point(now, s, { bytesReceived: 1_000 + 2 * 5_000_000, watching: true });
    expect(second).toMatchObject({
      completionsPerSecond: 3,
      repackMovesDone: 2,
      repackMovesFailed: 0,
      orphansResumed: 1,
      orphansReturned: 0,
      bytesBroadcastPerSecond: 5_000_000,
    });
  });

  it('gives the staleness percentiles of the last minute as the watch hands values in', () => {
    let now = 5_000_000;
    const recorder = new SeriesRecorder({}, () => now);
    // Inherent: 0 x 80, 1 x 15, 4 x 5. Consumption: 2 x 9 and 6 x 1 (counts per batch).
    for (let i = 0; i < 80; i++) recorder.inherent(0);
    for (let i = 0; i < 15; i++) recorder.inherent(1);
    for (let i = 0; i < 5; i++) recorder.inherent(4);
    recorder.consumption(2, 9);
    recorder.consumption(6, 1);
    const p = recorder.point(now, status(), { bytesReceived: null, watching: true });
    expect([p.inherentP50, p.inherentP90, p.inherentMax]).toEqual([0, 1, 4]);
    expect([p.consumptionP50, p.consumptionP90, p.consumptionMax]).toEqual([2, 2, 6]);
    // A minute later the values have left the window.
    now += 61_000;
    recorder.inherent(3);
    const later = recorder.point(now, status(), { bytesReceived: null, watching: true });
    expect([later.inherentP50, later.inherentMax, later.consumptionP50]).toEqual([3, 3, null]);
  });

  it('gives the counts the percentiles come from, over the same window on the same clock, as the histograms', () => {
    let now = 7_000_000;
    const recorder = new SeriesRecorder({}, () => now);
    expect(recorder.stalenessCounts(now)).toEqual({ inherent: [], consumption: [], windowS: 60, maxValue: 64 });
    // Inherent: 0 x 3, 2 x 1, 70 (folded into 64, "64 or more") x 2. Consumption: 1 x 5, 3 x 2 (per batch).
    for (const v of [0, 0, 2, 0, 70, 70]) recorder.inherent(v);
    recorder.consumption(1, 5);
    now += 30_000;
    recorder.consumption(3, 2);
    const counts = recorder.stalenessCounts(now);
    const inherent = Array.from({ length: 65 }, (_, v) => ({ 0: 3, 2: 1, 64: 2 })[v] ?? 0);
    expect(counts).toEqual({ inherent, consumption: [0, 5, 0, 2], windowS: 60, maxValue: 64 });
    // The percentile series at the same time are the percentiles of these counts.
    const p = recorder.point(now, status(), { bytesReceived: null, watching: true });
    expect([p.inherentP50, p.inherentP90, p.inherentMax]).toEqual([0.5, 0.9, 1].map((q) => percentileOfCounts(counts.inherent, q)));
    expect([p.consumptionP50, p.consumptionP90, p.consumptionMax]).toEqual([1, 3, 3]);
    expect([p.inherentP50, p.inherentMax]).toEqual([0, 64]);
    // 31 s later the first minute's values are out of the window; the batch 30 s later is still in.
    now += 31_000;
    expect(recorder.stalenessCounts(now)).toEqual({ inherent: [], consumption: [0, 0, 0, 2], windowS: 60, maxValue: 64 });
    // A shorter window says so.
    expect(new SeriesRecorder({ stalenessWindowMs: 10_000 }).stalenessCounts(now).windowS).toBe(10);
  });

  it('leaves a gap (null) where a source is missing', () => {
    const recorder = new SeriesRecorder();
    const empty: ManagerStatus = { ...status(), chain: [], newest: [], rollouts: [] };
    recorder.inherent(2);
    const t = Date.now();
    const point: SeriesPoint = recorder.point(t, empty, { bytesReceived: null, watching: false });
    const second = recorder.point(t + 1000, empty, { bytesReceived: null, watching: false });
    for (const name of [
      'completionsPerSecond',
      'tokensPerSecond',
      'trainerVersion',
      'rolloutVersionMin',
      'rolloutVersionMedian',
      'relaysAtNewest',
      'inherentP50',
      'consumptionP50',
      'bytesBroadcastPerSecond',
      'kvMean',
      'kvP90',
    ] as const) {
      expect(point[name], name).toBeNull();
      expect(second[name], name).toBeNull();
    }
    // The repack counts are in every status: a rate from the second point on.
    expect(second.repackMovesDone).toBe(0);
  });

  it('keeps a window of points, refuses a time that does not move on, and starts over on clear()', () => {
    let now = 10_000;
    const recorder = new SeriesRecorder({ capacity: 3 }, () => now);
    const s = status();
    for (let i = 0; i < 4; i++) {
      s.repack.moves.done += 1;
      expect(recorder.sample((now += 1000), s, { bytesReceived: 0, watching: false })).toBe(true);
    }
    expect(recorder.sample(now, s, { bytesReceived: 0, watching: false })).toBe(false);
    const window = recorder.window();
    expect(window.names).toEqual([...SERIES_NAMES]);
    expect(window.t).toEqual([12_000, 13_000, 14_000]);
    expect(window.values[SERIES_NAMES.indexOf('repackMovesDone')]).toEqual([1, 1, 1]);
    expect(window.values[SERIES_NAMES.indexOf('trainerVersion')]).toEqual([9, 9, 9]);

    recorder.inherent(5);
    recorder.consumption(2, 8);
    expect(recorder.stalenessCounts(now)).toMatchObject({ inherent: [0, 0, 0, 0, 0, 1], consumption: [0, 0, 8] });
    recorder.clear();
    expect(recorder.length).toBe(0);
    expect(recorder.stalenessCounts(now)).toMatchObject({ inherent: [], consumption: [] });
    // The rates' bases start over (no rate at the first point after), and the staleness values are gone.
    recorder.sample((now += 1000), s, { bytesReceived: 0, watching: true });
    const after = recorder.window();
    expect(after.values[SERIES_NAMES.indexOf('repackMovesDone')]).toEqual([null]);
    expect(after.values[SERIES_NAMES.indexOf('inherentMax')]).toEqual([null]);
  });
});

describe('the turns per trajectory the series recorder counts (the actions panel)', () => {
  it('counts each completed trajectory at its number of turns over the last minute, and starts over when cleared', () => {
    let now = 100_000;
    const recorder = new SeriesRecorder({}, () => now);
    for (const turns of [1, 3, 3, 2, 70]) recorder.turns(turns);
    // 70 is past the largest value kept: counted at 64 ("64+").
    const counts = recorder.turnsCounts(now);
    expect(counts.windowS).toBe(60);
    expect(counts.maxValue).toBe(64);
    expect(counts.counts.slice(0, 4)).toEqual([0, 1, 1, 2]);
    expect(counts.counts[64]).toBe(1);
    now += 61_000;
    recorder.turns(2);
    expect(recorder.turnsCounts(now).counts).toEqual([0, 0, 1]);
    recorder.clear();
    expect(recorder.turnsCounts(now).counts).toEqual([]);
  });
});
