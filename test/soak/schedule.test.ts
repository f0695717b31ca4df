/** The soak's fault schedule (seeded, overlapping, exclusions) and its trend test for leaks. */
import { describe, expect, it } from 'vitest';
import { FAULT_KINDS, faultSchedule, overlapping } from '../../src/soak/fault-schedule.js';
import { trend } from '../../src/soak/resources.js';

describe('faultSchedule', () => {
  it('is the same for the same seed and different for another', () => {
    const a = faultSchedule({ seed: 7, durationMs: 3_600_000, meanGapMs: 25_000 });
    expect(faultSchedule({ seed: 7, durationMs: 3_600_000, meanGapMs: 25_000 })).toEqual(a);
    expect(faultSchedule({ seed: 8, durationMs: 3_600_000, meanGapMs: 25_000 })).not.toEqual(a);
  });

  it('draws every kind, about duration / mean gap faults, ordered, inside the run, with overlaps', () => {
    const faults = faultSchedule({ seed: 1, durationMs: 2 * 3_600_000, meanGapMs: 25_000, quietStartMs: 20_000 });
    // Poisson count with mean 288: 5 standard deviations either side.
    expect(faults.length).toBeGreaterThan(288 - 5 * 17);
    expect(faults.length).toBeLessThan(288 + 5 * 17);
    expect(new Set(faults.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
    for (let i = 1; i < faults.length; i++) expect(faults[i]!.atMs).toBeGreaterThanOrEqual(faults[i - 1]!.atMs);
    expect(faults[0]!.atMs).toBeGreaterThanOrEqual(20_000);
    expect(faults.at(-1)!.atMs).toBeLessThan(2 * 3_600_000);
    expect(faults.map((f) => f.seq)).toEqual(faults.map((_, i) => i + 1));
    expect(overlapping(faults)).toBeGreaterThan(faults.length / 4);
  });

  it('leaves out excluded kinds and refuses to exclude them all', () => {
    const faults = faultSchedule({ seed: 3, durationMs: 3_600_000, meanGapMs: 10_000, exclude: ['stall-link'] });
    expect(faults.some((f) => f.kind === 'stall-link')).toBe(false);
    expect(() => faultSchedule({ seed: 3, durationMs: 1000, meanGapMs: 100, exclude: FAULT_KINDS })).toThrow(RangeError);
    expect(() => faultSchedule({ seed: 3, durationMs: 1000, meanGapMs: 0 })).toThrow(RangeError);
  });
});

describe('trend', () => {
  const minutes = Array.from({ length: 60 }, (_, i) => i * 60_000);
  // Deterministic noise of ±10 around 500.
  const noise = (i: number): number => ((i * 7919) % 21) - 10;

  it('calls noise around a level flat', () => {
    const t = trend(minutes.map((atMs, i) => ({ atMs, value: 500 + noise(i) })));
    expect(t.flat).toBe(true);
    expect(Math.abs(t.perHour)).toBeLessThan(2 * t.standardError + 1);
  });

  it('finds a leak of 100 per hour under the same noise', () => {
    const t = trend(minutes.map((atMs, i) => ({ atMs, value: 500 + (100 * atMs) / 3_600_000 + noise(i) })));
    expect(t.flat).toBe(false);
    expect(t.perHour).toBeGreaterThan(90);
    expect(t.perHour).toBeLessThan(110);
  });

  it('has nothing to say with fewer than three points', () => {
    expect(trend([{ atMs: 0, value: 1 }]).flat).toBe(true);
  });
});
