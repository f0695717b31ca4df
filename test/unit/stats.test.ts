/** The small shared statistics (src/common/stats.ts): the median, and the nearest-rank percentile of a histogram that sim-trainer and the simulator both report staleness with. */
import { describe, expect, it } from 'vitest';
import { histogramMean, histogramPercentile, median, mergeHistograms } from '../../src/common/stats.js';

describe('stats', () => {
  it('median of an odd and an even count, 0 for none', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 2, 3])).toBe(2.5);
    expect(median([])).toBe(0);
  });

  it('histogramPercentile by nearest rank over value -> count, 0 when empty', () => {
    expect(histogramPercentile({ 0: 2, 1: 1, 2: 1 }, 0.5)).toBe(0);
    expect(histogramPercentile({ 0: 2, 1: 1, 2: 1 }, 0.9)).toBe(2);
    expect(histogramPercentile({ 3: 1, 5: 2 }, 0.5)).toBe(5);
    expect(histogramPercentile({ 10: 1, 2: 3 }, 0)).toBe(2);
    expect(histogramPercentile({}, 0.5)).toBe(0);
    expect(histogramPercentile({ 4: 0 }, 0.5)).toBe(0);
  });

  it('mergeHistograms adds counts per value; histogramMean weighs each value by its count, 0 when empty', () => {
    // JSON keys come back as strings: they merge with numeric ones.
    const fromJson = JSON.parse('{"1": 3, "2": 1}') as Record<number, number>;
    expect(mergeHistograms([{ 0: 2, 1: 1 }, fromJson, {}])).toEqual({ 0: 2, 1: 4, 2: 1 });
    expect(mergeHistograms([])).toEqual({});
    expect(histogramMean({ 0: 2, 1: 4, 2: 1 })).toBeCloseTo(6 / 7, 12);
    expect(histogramMean({})).toBe(0);
  });
});
