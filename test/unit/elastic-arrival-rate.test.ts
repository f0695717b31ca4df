/**
 * The elastic supervisor's arrival rates (src/actions/elastic/arrival-rate.ts) and what the
 * scheduler does with them: a kind receiving a steady stream of actions gets a worker even when
 * its queue is empty at the moment it is sampled (it scales up ahead of its queue).
 */
import { describe, expect, it } from 'vitest';
import { ArrivalRates } from '../../src/actions/elastic/arrival-rate.js';
import { scheduleElastic } from '../../src/actions/elastic/scheduler.js';
import { observe } from '../../src/actions/elastic/supervisor.js';

const ONE_CORE = { cores: 1, memoryMiB: 0, apiCalls: 0 };
const BUDGET = { cores: 4, memoryMiB: Infinity, apiCalls: Infinity };

describe('ArrivalRates', () => {
  it('is the count over the time the window spans, and 0 before two samples', () => {
    const r = new ArrivalRates(10_000);
    expect(r.observe('k', 0, 0)).toBe(0);
    expect(r.observe('k', 1000, 5)).toBe(5);
    expect(r.observe('k', 2000, 15)).toBe(7.5);
  });

  it('forgets what is older than the window', () => {
    const r = new ArrivalRates(2000);
    r.observe('k', 0, 0);
    r.observe('k', 1000, 100); // a burst
    r.observe('k', 2000, 100);
    r.observe('k', 3000, 100);
    expect(r.observe('k', 4000, 104)).toBe(2); // (104 - 100) over the 2 s from t = 2000
  });

  it('starts over when the count goes back (a consumer made again), and keeps kinds apart', () => {
    const r = new ArrivalRates(10_000);
    r.observe('k', 0, 50);
    r.observe('j', 0, 0);
    expect(r.observe('k', 1000, 60)).toBe(10);
    expect(r.observe('k', 2000, 3)).toBe(0);
    expect(r.observe('k', 3000, 9)).toBe(6);
    expect(r.observe('j', 1000, 1)).toBe(1);
  });
});

describe('planning with arrivals', () => {
  it('gives a kind with a steady arrival and an empty queue a worker, and none without arrivals', () => {
    const rates = new ArrivalRates(10_000);
    // 4 actions a second reached the queue, each taken at once by a worker elsewhere: the queue
    // and the consumer's running count are 0 at every sample.
    let rate = 0;
    for (let s = 0; s <= 5; s++) rate = rates.observe('k', s * 1000, s * 4);
    const idle = { kind: 'k', waiting: 0, running: 0 } as Parameters<typeof observe>[2];
    const steady = observe('k', ONE_CORE, idle, 0, rate, 200);
    expect(steady.queued).toBe(0);
    expect(scheduleElastic([steady], BUDGET, { horizonMs: 2000 }).targets.k).toBeGreaterThanOrEqual(1);
    const quiet = observe('k', ONE_CORE, idle, 0, 0, 200);
    expect(scheduleElastic([quiet], BUDGET, { horizonMs: 2000 }).targets.k).toBe(0);
  });
});
