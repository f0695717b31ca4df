/**
 * The elastic action scheduler (src/actions/elastic/scheduler.ts) under random loads and budgets:
 * within the budget, a worker for every kind with queued work when they all fit, no worker left
 * unplaced that would lower the objective, and a fixed point when a simulated pool drains.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { drainSumMs, kindActSumMs } from '../../src/actions/elastic/act-model.js';
import { fits, RESOURCE_DIMENSIONS, type Resources } from '../../src/actions/elastic/resources.js';
import { scheduleElastic, type KindObservation } from '../../src/actions/elastic/scheduler.js';
import { LaminarError } from '../../src/common/errors.js';

const costArb: fc.Arbitrary<Resources> = fc.record({
  cores: fc.constantFrom(0.25, 0.5, 1, 2),
  memoryMiB: fc.constantFrom(0, 128, 512, 2048),
  apiCalls: fc.constantFrom(0, 0, 1, 4),
});
const budgetArb: fc.Arbitrary<Resources> = fc.record({
  cores: fc.integer({ min: 0, max: 32 }),
  memoryMiB: fc.oneof(fc.integer({ min: 0, max: 16384 }), fc.constant(Infinity)),
  apiCalls: fc.oneof(fc.integer({ min: 0, max: 16 }), fc.constant(Infinity)),
});
const kindsArb: fc.Arbitrary<KindObservation[]> = fc
  .array(
    fc.record({
      queued: fc.integer({ min: 0, max: 200 }),
      arrivalPerSec: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 20, noNaN: true })),
      execMs: fc.integer({ min: 1, max: 5000 }),
      cost: costArb,
      oldestWaitMs: fc.integer({ min: 0, max: 60_000 }),
    }),
    { maxLength: 6 },
  )
  .map((ks) => ks.map((k, i) => ({ ...k, kind: `k${i}` })));

const H = 10_000;
const costOf = (kinds: KindObservation[], targets: Record<string, number>): Resources => {
  const u = { cores: 0, memoryMiB: 0, apiCalls: 0 };
  for (const k of kinds) for (const d of RESOURCE_DIMENSIONS) u[d] += k.cost[d] * targets[k.kind]!;
  return u;
};

const oneCoreKind = (kind: string, queued: number, arrivalPerSec: number, execMs: number): KindObservation => ({
  kind,
  queued,
  arrivalPerSec,
  execMs,
  cost: { cores: 1, memoryMiB: 0, apiCalls: 0 },
});
const onCores = (cores: number, ...kinds: KindObservation[]) => scheduleElastic(kinds, { cores, memoryMiB: Infinity, apiCalls: Infinity });

describe('act model', () => {
  it('sums FCFS completion times wave by wave', () => {
    expect(drainSumMs(5, 2, 10)).toBe(10 + 10 + 20 + 20 + 30);
    expect(drainSumMs(3, 5, 10)).toBe(30);
    expect(drainSumMs(0, 0, 10)).toBe(0);
    expect(drainSumMs(1, 0, 10)).toBe(Infinity);
  });
  it('never gets worse with one more worker', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 500 }), fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 1000 }), (n, w, t) => {
        expect(drainSumMs(n, w + 1, t)).toBeLessThanOrEqual(drainSumMs(n, w, t));
      }),
    );
  });
});

describe('scheduleElastic', () => {
  it('never exceeds the budget, and `used` is what the targets cost', () => {
    fc.assert(
      fc.property(kindsArb, budgetArb, (kinds, budget) => {
        const plan = scheduleElastic(kinds, budget, { horizonMs: H });
        const used = costOf(kinds, plan.targets);
        for (const d of RESOURCE_DIMENSIONS) {
          expect(used[d]).toBeLessThanOrEqual(budget[d] + 1e-9);
          expect(plan.used[d]).toBeCloseTo(used[d], 6);
        }
      }),
    );
  });

  it('gives every kind with queued work a worker when one each fits', () => {
    fc.assert(
      fc.property(kindsArb, budgetArb, (kinds, budget) => {
        const queued = kinds.filter((k) => k.queued > 0);
        const oneEach = costOf(queued, Object.fromEntries(queued.map((k) => [k.kind, 1])));
        fc.pre(fits(oneEach, { cores: 0, memoryMiB: 0, apiCalls: 0 }, budget));
        const plan = scheduleElastic(kinds, budget, { horizonMs: H });
        for (const k of queued) expect(plan.targets[k.kind]).toBeGreaterThanOrEqual(1);
        expect(plan.evicted.filter((e) => queued.some((k) => k.kind === e))).toEqual([]);
      }),
    );
  });

  it("leaves no affordable worker that would lower a kept kind's ACT, and none past its demand", () => {
    fc.assert(
      fc.property(kindsArb, budgetArb, (kinds, budget) => {
        const plan = scheduleElastic(kinds, budget, { horizonMs: H });
        for (const k of kinds) {
          const w = plan.targets[k.kind]!;
          const n = k.queued + Math.ceil(k.arrivalPerSec * (H / 1000));
          expect(w).toBeLessThanOrEqual(Math.max(0, n));
          if (w === 0) continue;
          if (fits(plan.used, k.cost, budget)) expect(kindActSumMs(k, w + 1, H)).toBe(kindActSumMs(k, w, H));
        }
      }),
    );
  });

  it('is deterministic and reaches a fixed point as a simulated pool drains its queue', () => {
    fc.assert(
      fc.property(kindsArb, budgetArb, (kinds, budget) => {
        let state = kinds.map((k) => ({ ...k, arrivalPerSec: 0 }));
        let rounds = 0;
        for (;;) {
          const plan = scheduleElastic(state, budget, { horizonMs: H });
          expect(scheduleElastic(state, budget, { horizonMs: H })).toEqual(plan);
          if (Object.values(plan.targets).every((w) => w === 0)) break;
          expect(++rounds).toBeLessThan(400);
          // One round of H ms: each worker completes floor(H / execMs) actions (at least one).
          state = state.map((k) => ({ ...k, queued: Math.max(0, k.queued - plan.targets[k.kind]! * Math.max(1, Math.floor(H / k.execMs))) }));
        }
        // The fixed point (no workers) comes only once every kind that can have a worker is drained.
        for (const k of state) if (fits({ cores: 0, memoryMiB: 0, apiCalls: 0 }, k.cost, budget)) expect(k.queued).toBe(0);
      }),
    );
  });

  it('scales the kind whose queue costs most ACT, within a core budget', () => {
    const plan = onCores(8, oneCoreKind('code', 40, 0, 1000), oneCoreKind('search', 4, 0, 100));
    expect(plan.targets.code! + plan.targets.search!).toBe(8);
    expect(plan.targets.code).toBeGreaterThan(plan.targets.search!);
    expect(plan.targets.search).toBeGreaterThanOrEqual(1);
  });

  it('evicts a warm worker for arrivals when scaling a queued kind gains more, and says so', () => {
    const plan = onCores(2, oneCoreKind('code', 100, 0, 1000), oneCoreKind('rare', 0, 0.1, 10));
    expect(plan.targets).toEqual({ code: 2, rare: 0 });
    expect(plan.evicted).toEqual(['rare']);
  });

  it("gives a burst the warm workers of a kind expecting a trickle: a kind left out waits a round and an action, not a pool's drain", () => {
    // The elastic bench's python burst (13 queued, 1.26 s each, a core a worker) beside search,
    // queue empty, ~1.2 arrivals expected within the 250 ms round (0.6 s each, half a core).
    // Priced at the python pool's whole drain, the arrivals kept two search workers and python
    // three of its four cores.
    const kind = (name: string, queued: number, arrivalPerSec: number, execMs: number, cores: number): KindObservation => ({
      kind: name,
      queued,
      arrivalPerSec,
      execMs,
      cost: { cores, memoryMiB: 0, apiCalls: 0 },
    });
    const plan = scheduleElastic(
      [kind('python', 13, 2.2, 1260, 1), kind('search', 0, 4.69, 600, 0.5)],
      { cores: 4, memoryMiB: Infinity, apiCalls: Infinity },
      { horizonMs: 250 },
    );
    expect(plan.targets).toEqual({ python: 4, search: 0 });
    expect(plan.evicted).toEqual(['search']);
    // With python's queue nearly drained, search keeps its warm worker.
    expect(
      scheduleElastic(
        [kind('python', 2, 2.2, 1260, 1), kind('search', 0, 2, 600, 0.5)],
        { cores: 4, memoryMiB: Infinity, apiCalls: Infinity },
        { horizonMs: 250 },
      ).targets,
    ).toEqual({
      python: 3,
      search: 1,
    });
  });

  it('reports a kind whose one worker exceeds the budget as unfit', () => {
    const plan = scheduleElastic([{ kind: 'gpu', queued: 3, arrivalPerSec: 0, execMs: 10, cost: { cores: 64, memoryMiB: 0, apiCalls: 0 } }], {
      cores: 8,
      memoryMiB: Infinity,
      apiCalls: Infinity,
    });
    expect(plan).toMatchObject({ targets: { gpu: 0 }, unfit: ['gpu'] });
  });

  it('refuses figures it cannot plan with, by code', () => {
    const base = { kind: 'k', queued: 1, arrivalPerSec: 0, execMs: 10, cost: { cores: 1, memoryMiB: 0, apiCalls: 0 } };
    const budget = { cores: 4, memoryMiB: Infinity, apiCalls: Infinity };
    for (const bad of [
      { ...base, queued: -1 },
      { ...base, execMs: NaN },
      { ...base, cost: { ...base.cost, cores: Infinity } },
    ]) {
      expect(() => scheduleElastic([bad], budget)).toThrow(expect.objectContaining({ code: 'ERR_BAD_ELASTIC_INPUT' }) as LaminarError);
    }
    expect(() => scheduleElastic([base, base], budget)).toThrow(/twice/);
    expect(() => scheduleElastic([base], { ...budget, cores: -1 })).toThrow(expect.objectContaining({ code: 'ERR_BAD_ELASTIC_INPUT' }) as LaminarError);
  });
});
