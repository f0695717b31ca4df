/**
 * Inherent staleness (the paper's Figure 10): the trainer's version when a trajectory completed
 * minus the version that generated it, from the times the trainer's versions became current.
 */
import { describe, expect, it } from 'vitest';
import { VersionClock } from '../../src/stand-ins/trainer/version-clock.js';

describe('VersionClock', () => {
  const clock = new VersionClock();
  clock.published(3, 1_000);
  clock.published(4, 2_000);
  clock.published(4, 2_500); // a version offered again: not newer, ignored
  clock.published(6, 3_000); // v5 refused and never current: the next step's version follows

  it('answers the newest version current at a time, the first before the run began', () => {
    expect([500, 1_000, 1_999, 2_000, 2_999, 3_000, 9_999].map((t) => clock.versionAt(t))).toEqual([3, 3, 3, 4, 4, 6, 6]);
    expect(clock.size).toBe(3);
    expect(new VersionClock().versionAt(1)).toBeUndefined();
  });

  it('summarises the inherent staleness of a batch, never below 0', () => {
    const s = clock.inherent([
      { completedAt: 1_500, weightVersion: 3 }, // 0
      { completedAt: 2_100, weightVersion: 3 }, // 1
      { completedAt: 3_100, weightVersion: 3 }, // 3
      { completedAt: 3_200, weightVersion: 6 }, // 0
      { completedAt: 1_200, weightVersion: 4 }, // saw v4 before the publish returned: 0, not -1
    ]);
    expect(s).toEqual({ p50: 0, min: 0, max: 3, mean: 0.8, histogram: { 0: 3, 1: 1, 3: 1 } });
    expect(clock.inherent([])).toEqual({ p50: 0, min: 0, max: 0, mean: 0, histogram: {} });
  });

  it('keeps times from going backwards when the wall clock steps back', () => {
    const c = new VersionClock();
    c.published(1, 5_000);
    c.published(2, 4_000);
    expect([c.versionAt(4_500), c.versionAt(5_000)]).toEqual([1, 2]);
  });
});
