/**
 * The simulator's workload: lengths that are pure functions of the seed and the trajectory
 * number, long-tailed as the paper's Figure 2, with a median that follows the scenario's
 * schedule over training, and independent labelled streams.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadScenario } from '../../src/simulate/scenario/load.js';
import { medianAt } from '../../src/simulate/workload/length-schedule.js';
import { labelHash, randomStream, streamSeed } from '../../src/simulate/workload/seeds.js';
import { Workload } from '../../src/simulate/workload/workload.js';

const SCENARIOS = join(import.meta.dirname, '../../src/simulate/scenarios');

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

describe('labelled streams', () => {
  it('give the same draws for the same (seed, label, index), and unrelated ones otherwise', () => {
    const draws = (seed: number, label: string, index: number): number[] => {
      const rng = randomStream(seed, label)(index);
      return [rng(), rng(), rng()];
    };
    expect(draws(1, 'output-tokens', 42)).toEqual(draws(1, 'output-tokens', 42));
    const base = draws(1, 'output-tokens', 42);
    for (const other of [
      draws(2, 'output-tokens', 42),
      draws(1, 'prompt-tokens', 42),
      draws(1, 'output-tokens', 43),
      draws(1, 'output-tokens', 42 + 2 ** 32),
    ]) {
      expect(other.some((x, i) => x === base[i])).toBe(false);
    }
    // Neighbouring indices are not correlated: the first draws of 0..9999 are uniform.
    const buckets = new Array<number>(10).fill(0);
    const stream = randomStream(7, 'x');
    for (let i = 0; i < 10_000; i++) buckets[Math.floor(stream(i)() * 10)]! += 1;
    for (const n of buckets) expect(Math.abs(n - 1000)).toBeLessThan(120);
    expect(new Set(Array.from({ length: 1000 }, (_, i) => streamSeed(1, labelHash('y'), i))).size).toBe(1000);
  });
});

describe('median schedule', () => {
  it('is flat outside its points and linear between them', () => {
    const points = [
      { step: 10, tokens: 1000 },
      { step: 20, tokens: 2000 },
      { step: 40, tokens: 1000 },
    ];
    expect(medianAt(points, 0)).toBe(1000);
    expect(medianAt(points, 15)).toBe(1500);
    expect(medianAt(points, 20)).toBe(2000);
    expect(medianAt(points, 30)).toBe(1500);
    expect(medianAt(points, 99)).toBe(1000);
    expect(medianAt([{ step: 0, tokens: 7 }], 5)).toBe(7);
  });
});

describe('Workload', () => {
  const scenario = loadScenario(join(SCENARIOS, 'math-72b.json'));
  const workload = new Workload(scenario);

  it('numbers trajectories by prompt group and prompts by nominal training step', () => {
    expect(workload.batchSize).toBe(8192);
    expect(workload.promptOf(0)).toBe(0);
    expect(workload.promptOf(15)).toBe(0);
    expect(workload.promptOf(16)).toBe(1);
    expect(workload.stepOf(511)).toBe(0);
    expect(workload.stepOf(512)).toBe(1);
    const group = workload.group(3);
    expect(group.map((r) => r.id)).toEqual(Array.from({ length: 16 }, (_, i) => 48 + i));
    // One prompt length per group; the same request whichever way it is asked for.
    expect(new Set(group.map((r) => r.promptTokens)).size).toBe(1);
    for (const r of group) expect(workload.request(r.id)).toEqual(r);
    expect(new Workload(scenario).group(3)).toEqual(group);
    expect(new Workload({ ...scenario, seed: 2 }).group(3)).not.toEqual(group);
  });

  it("shares the prompt's part of the log-length variance within its group (groupLengthCorrelation), the spread over all unchanged", () => {
    // The share of the log-length variance between groups: 0.5 + 0.5 / 16 with the scenario's share
    // of 0.5, 1 / 16 when every response is drawn alone (the 16K clamp trims both a little).
    const betweenShare = (w: Workload): number => {
      const logs: number[][] = [];
      for (let p = 0; p < 2000; p++) logs.push(Array.from({ length: 16 }, (_, i) => Math.log(w.outputTokens(p * 16 + i))));
      const all = logs.flat();
      const mu = all.reduce((a, b) => a + b, 0) / all.length;
      const total = all.reduce((a, x) => a + (x - mu) ** 2, 0) / all.length;
      const between = logs.reduce((a, g) => a + (g.reduce((x, y) => x + y, 0) / g.length - mu) ** 2, 0) / logs.length;
      return between / total;
    };
    expect(scenario.workload.outputTokens.promptShare).toBe(0.5);
    expect(betweenShare(workload)).toBeGreaterThan(0.45);
    expect(betweenShare(workload)).toBeLessThan(0.6);
    const alone = new Workload(scenario, false);
    expect(betweenShare(alone)).toBeLessThan(0.1);
    // Off is the share read as 0: the draws of a scenario without it.
    const zero = new Workload({ ...scenario, workload: { ...scenario.workload, outputTokens: { ...scenario.workload.outputTokens, promptShare: 0 } } });
    for (let id = 0; id < 200; id++) expect(alone.outputTokens(id)).toBe(zero.outputTokens(id));
  });

  it('draws long-tailed responses whose median follows the schedule over training (3,500 → 4,500 tokens by step 100)', () => {
    const lengthsAtStep = (step: number): number[] => {
      const first = step * workload.batchSize;
      return Array.from({ length: 2 * workload.batchSize }, (_, i) => workload.outputTokens(first + i));
    };
    for (const [step, median] of [
      [0, 3500],
      [50, 4000],
      [100, 4500],
      [150, 4500],
    ] as const) {
      const xs = lengthsAtStep(step);
      const m = quantile(xs, 0.5);
      expect(Math.abs(m / median - 1), `median at step ${step}`).toBeLessThan(0.04);
      // Log-normal with p99/median 10: p90 = median × 10^(1.2816 / 2.3263) ≈ 3.55 × median.
      expect(quantile(xs, 0.9) / m).toBeGreaterThan(3.2);
      expect(quantile(xs, 0.9) / m).toBeLessThan(3.9);
      // The 16K generation limit clamps the tail (about 6 % at a 3,500 median).
      expect(Math.max(...xs)).toBe(16384);
      expect(Math.min(...xs)).toBeGreaterThanOrEqual(1);
    }
  });

  it('draws prompts around their median, within the maximum', () => {
    const xs = Array.from({ length: 5000 }, (_, p) => workload.promptTokens(p));
    expect(Math.abs(quantile(xs, 0.5) / 256 - 1)).toBeLessThan(0.03);
    expect(Math.max(...xs)).toBeLessThanOrEqual(2048);
    expect(quantile(xs, 0.99) / quantile(xs, 0.5)).toBeLessThan(2.2);
  });
});
