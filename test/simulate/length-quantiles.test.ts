/**
 * Response lengths given by their quantiles (a scenario's `workload.outputTokens.quantiles`,
 * src/simulate/workload/length-quantiles.ts): the normal quantile against known values; a table of
 * two points is the log-normal of `p99OverMedian`, to the token, with and without the prompt's
 * share; another table gives its own quantiles back; the schema's rules for a table, each
 * ERR_BAD_SCENARIO naming the field; and a whole run on a table.
 */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { runScenario } from '../../src/simulate/run.js';
import { parseScenario } from '../../src/simulate/scenario/load.js';
import type { ScenarioInput } from '../../src/simulate/scenario/schema.js';
import { normalQuantile, quantileShape } from '../../src/simulate/workload/length-quantiles.js';
import { Workload } from '../../src/simulate/workload/workload.js';
import { tinyInput } from './tiny-scenario.js';

const LOG_NORMAL_10 = [
  { p: 0.5, ofMedian: 1 },
  { p: 0.99, ofMedian: 10 },
];

function withShape(shape: Partial<ScenarioInput['workload']['outputTokens']>, promptShare = 0): ScenarioInput {
  const s = tinyInput();
  s.workload.outputTokens = { median: [{ step: 0, tokens: 400 }], max: 8192, promptShare, ...shape };
  return s;
}

function sortedQuantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

describe('length quantiles', () => {
  it("computes the normal's quantiles", () => {
    expect(normalQuantile(0.5)).toBe(0);
    expect(normalQuantile(0.99)).toBeCloseTo(2.326348, 5);
    expect(normalQuantile(0.001)).toBeCloseTo(-3.090232, 5);
    expect(normalQuantile(0.8413447)).toBeCloseTo(1, 5);
    expect(normalQuantile(0.2)).toBeCloseTo(-normalQuantile(0.8), 9);
    expect(() => normalQuantile(1)).toThrow(RangeError);
  });

  it('a table of two points is the log-normal through them, beyond them too', () => {
    const shape = quantileShape(LOG_NORMAL_10);
    const sigma = Math.log(10) / normalQuantile(0.99);
    for (const z of [-3, -1, 0, 0.5, 2.3, 3.5]) expect(shape(z)).toBeCloseTo(Math.exp(sigma * z), 6);
  });

  it("draws each trajectory the log-normal's length to the token, with and without the prompt's share", () => {
    for (const share of [0, 0.5]) {
      const table = new Workload(parseScenario(withShape({ quantiles: LOG_NORMAL_10 }, share)));
      const lognormal = new Workload(parseScenario(withShape({ p99OverMedian: 10 }, share)));
      for (let id = 0; id < 2000; id++)
        expect(Math.abs(table.outputTokens(id) - lognormal.outputTokens(id)), `id ${id}, share ${share}`).toBeLessThanOrEqual(1);
    }
  });

  it('gives back the quantiles of its table', () => {
    const quantiles = [
      { p: 0.1, ofMedian: 0.5 },
      { p: 0.5, ofMedian: 1 },
      { p: 0.9, ofMedian: 1.3 },
      { p: 0.99, ofMedian: 15 },
    ];
    const workload = new Workload(parseScenario(withShape({ quantiles })));
    const lengths = Array.from({ length: 20_000 }, (_, id) => workload.outputTokens(id));
    // Within the sampling error of 20,000 draws: a few per cent, about 6 % at p99 where the tail is steep.
    for (const q of quantiles) expect(Math.abs(sortedQuantile(lengths, q.p) / 400 / q.ofMedian - 1), `p ${q.p}`).toBeLessThan(q.p === 0.99 ? 0.15 : 0.05);
    expect(Math.max(...lengths)).toBe(8192);
  });

  it('the schema takes one shape, a table through the median, p increasing, lengths never decreasing', () => {
    const field = (shape: Partial<ScenarioInput['workload']['outputTokens']>): unknown => {
      try {
        parseScenario(withShape(shape));
      } catch (err) {
        expect((err as { code: string }).code).toBe(ErrorCodes.BAD_SCENARIO);
        return (err as { details: { field: string } }).details.field;
      }
      return null;
    };
    expect(field({ quantiles: LOG_NORMAL_10, p99OverMedian: null })).toBeNull();
    expect(field({ quantiles: LOG_NORMAL_10, p99OverMedian: 10 })).toBe('workload.outputTokens');
    expect(field({})).toBe('workload.outputTokens');
    expect(
      field({
        quantiles: [
          { p: 0.9, ofMedian: 2 },
          { p: 0.99, ofMedian: 10 },
        ],
      }),
    ).toBe('workload.outputTokens.quantiles');
    expect(
      field({
        quantiles: [
          { p: 0.5, ofMedian: 1 },
          { p: 0.4, ofMedian: 2 },
        ],
      }),
    ).toBe('workload.outputTokens.quantiles');
    expect(
      field({
        quantiles: [
          { p: 0.5, ofMedian: 1 },
          { p: 0.9, ofMedian: 0.8 },
        ],
      }),
    ).toBe('workload.outputTokens.quantiles');
    expect(
      field({
        quantiles: [
          { p: 0.5, ofMedian: 1 },
          { p: 1, ofMedian: 10 },
        ],
      }),
    ).toBe('workload.outputTokens.quantiles[1].p');
    expect(field({ quantiles: [{ p: 0.5, ofMedian: 1 }] })).toBe('workload.outputTokens.quantiles');
  });

  it('runs a job on a table: a lighter tail than the log-normal trains the same trajectories sooner', () => {
    const light = parseScenario(
      withShape({
        quantiles: [
          { p: 0.5, ofMedian: 1 },
          { p: 0.99, ofMedian: 3 },
        ],
      }),
    );
    const heavy = parseScenario(withShape({ p99OverMedian: 10 }));
    const a = runScenario(light, 'sync', { steps: 3 });
    const b = runScenario(heavy, 'sync', { steps: 3 });
    expect(a.ledger.consumed).toBe(b.ledger.consumed);
    expect(a.virtualS).toBeLessThan(b.virtualS);
  });
});
