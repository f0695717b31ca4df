/**
 * LeapEngine (src/simulate/engine/) against EngineCore (src/stand-ins/engine-core.ts) stepped one step
 * at a time: on random profiles and random submissions, removals, resubmissions and idle gaps,
 * every admission, preemption and finish happens at the same virtual time in both, and the KV,
 * running and waiting counts agree after every step, while LeapEngine crosses most steps in
 * closed form. Profiles use dyadic times (integer step times, prefill and KV-read costs in powers
 * of two, B a power of two) so that both engines' sums are exact and "the same time" means equal
 * floats, not close ones.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { EngineCore, type EngineProfile, type SimRequest } from '../../src/stand-ins/engine-core.js';
import { makeRng } from '../../src/stand-ins/lengths.js';
import { LeapEngine, type LeapRequest } from '../../src/simulate/engine/leap-engine.js';

const profileArb: fc.Arbitrary<EngineProfile> = fc.record({
  kvCapacityTokens: fc.integer({ min: 16, max: 400 }),
  rooflineBatch: fc.constantFrom(1, 2, 4, 8, 16),
  maxRunning: fc.integer({ min: 1, max: 24 }),
  decodeStepMs: fc.integer({ min: 1, max: 50 }),
  prefillMsPerToken: fc.integer({ min: 0, max: 12 }).map((k) => k / 64),
  slopeBeyondRoofline: fc.constantFrom(0, 0.5, 1, 2),
  // k/1024 ms per token: 1e6/1024 is exact in binary, so is the engine's division by 1e6.
  kvReadMsPerMToken: fc.integer({ min: 0, max: 16 }).map((k) => (k * 1e6) / 1024),
  // An eager engine's floor (integer ms) half the time: up to twice the largest decode step, so
  // that growth runs cross from the floor to the KV-bound steps inside a leap.
  eagerFloorMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 100 })),
});

/** Mostly short prompts with long outputs, so that requests outgrow the cache together and preempt. */
function requestsArb(cap: number, count: number): fc.Arbitrary<LeapRequest[]> {
  const promptMax = fc.oneof(
    { weight: 3, arbitrary: fc.constant(Math.max(1, Math.floor(cap / 10))) },
    { weight: 1, arbitrary: fc.constant(Math.max(1, Math.floor(cap / 2))) },
  );
  const one = fc.record({
    prompt: promptMax.chain((max) => fc.integer({ min: 1, max })),
    // Half the time long: fast-check leans towards small values, and short requests never crowd the cache.
    frac: fc.oneof(fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0.3, max: 1, noNaN: true })),
    resumed: fc.double({ min: 0, max: 1, noNaN: true }),
  });
  return fc.array(one, { minLength: 1, maxLength: count }).map((xs) =>
    xs.map(({ prompt, frac, resumed }, id) => {
      const target = Math.max(1, Math.floor(frac * (cap - prompt)));
      const generated = resumed < 0.3 ? Math.min(target - 1, Math.floor(resumed * 3 * target)) : 0;
      return { id, promptTokens: prompt, targetTokens: target, generated };
    }),
  );
}

type Op = { kind: 'steps'; count: number } | { kind: 'submit'; count: number } | { kind: 'remove'; picks: number[] } | { kind: 'wait'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('steps' as const), count: fc.integer({ min: 1, max: 60 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('submit' as const), count: fc.integer({ min: 1, max: 8 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('remove' as const), picks: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 1, max: 100 }) }) },
);

interface Timed {
  id: number;
  at: number;
}

/** What both engines must agree on. */
interface Trace {
  admitted: Timed[];
  preempted: Timed[];
  finished: Timed[];
  /** After every step: time, KV, running, waiting. */
  loads: [number, number, number, number][];
  /** Requests taken out, with their generated count. */
  removed: [number, number][];
}

function emptyTrace(): Trace {
  return { admitted: [], preempted: [], finished: [], loads: [], removed: [] };
}

function toCore(r: LeapRequest): SimRequest {
  return {
    id: String(r.id),
    promptTokens: r.promptTokens,
    targetTokens: r.targetTokens,
    generated: new Array<number>(r.generated).fill(7),
    logprobs: new Array<number>(r.generated).fill(-0.5),
  };
}

/**
 * Plays `ops` on both engines. EngineCore has no clock: the test keeps one, adding each step's
 * ms, and applies commands at the end of the last step (or later, after an idle wait).
 * LeapEngine gets the same commands at the same virtual times and is otherwise only woken at its
 * own nextEventAt(), as a simulation would drive it.
 */
function play(profile: EngineProfile, pool: LeapRequest[], ops: Op[]): { core: Trace; leap: Trace; engine: LeapEngine } {
  const core = new EngineCore(profile, makeRng(1));
  const coreTrace = emptyTrace();
  const leapTrace = emptyTrace();
  const engine = new LeapEngine(profile, {
    finished: (id, at) => leapTrace.finished.push({ id, at }),
    admitted: (id, at) => leapTrace.admitted.push({ id, at }),
    preempted: (id, at) => leapTrace.preempted.push({ id, at }),
  });
  const catchUp = (t: number): void => {
    for (let next = engine.nextEventAt(); next < t; next = engine.nextEventAt()) engine.wake(next);
  };

  let clock = 0;
  let nextNew = 0;
  const held = new Set<number>();
  const moved: SimRequest[] = [];
  const byId = new Map(pool.map((r) => [r.id, r]));

  const stepCore = (): void => {
    const start = clock;
    const res = core.step();
    clock = start + res.ms;
    for (const id of res.preempted) coreTrace.preempted.push({ id: Number(id), at: start });
    for (const id of res.admitted) coreTrace.admitted.push({ id: Number(id), at: start });
    for (const r of res.finished) {
      coreTrace.finished.push({ id: Number(r.id), at: clock });
      held.delete(Number(r.id));
    }
    coreTrace.loads.push([clock, core.kvUsedTokens, core.running, core.waiting]);
    catchUp(clock);
    const load = engine.loadAt(clock);
    leapTrace.loads.push([clock, load.kvUsed, load.running, load.waiting]);
  };

  for (const op of ops) {
    if (op.kind === 'steps') {
      for (let i = 0; i < op.count && !core.idle; i++) stepCore();
    } else if (op.kind === 'wait') {
      if (core.idle) clock += op.ms;
    } else if (op.kind === 'submit') {
      const batch: SimRequest[] = moved.splice(0, op.count);
      while (batch.length < op.count && nextNew < pool.length) batch.push(toCore(pool[nextNew++]!));
      if (batch.length === 0) continue;
      for (const r of batch) {
        core.submit(r);
        held.add(Number(r.id));
      }
      catchUp(clock);
      engine.submit(
        batch.map((r) => ({ ...byId.get(Number(r.id))!, generated: r.generated.length })),
        clock,
      );
    } else {
      const mine = [...held];
      if (mine.length === 0) continue;
      const ids = op.picks.map((p) => mine[p % mine.length]!);
      const out = core.remove(ids.map(String));
      for (const r of out) {
        coreTrace.removed.push([Number(r.id), r.generated.length]);
        held.delete(Number(r.id));
        moved.push(r);
      }
      catchUp(clock);
      for (const r of engine.remove(ids, clock)) leapTrace.removed.push([r.id, r.generated]);
    }
  }
  // Run both to the end, resubmitting whatever is still out.
  for (;;) {
    while (!core.idle) stepCore();
    if (moved.length === 0 && nextNew >= pool.length) break;
    const batch = moved.splice(0);
    while (nextNew < pool.length) batch.push(toCore(pool[nextNew++]!));
    for (const r of batch) core.submit(r);
    catchUp(clock);
    engine.submit(
      batch.map((r) => ({ ...byId.get(Number(r.id))!, generated: r.generated.length })),
      clock,
    );
  }
  catchUp(Number.POSITIVE_INFINITY);
  return { core: coreTrace, leap: leapTrace, engine };
}

// Properties whose generated cases are also counted (coverage claims) run on this seed.
const COVERAGE_SEED = 20261128;

describe('LeapEngine against EngineCore', () => {
  it('admits, preempts and finishes the same requests at the same virtual times, with the same KV after every step', () => {
    let steps = 0;
    let leaped = 0;
    let preempting = 0;
    let removing = 0;
    let reading = 0;
    let flooring = 0;
    fc.assert(
      fc.property(
        profileArb.chain((p) => fc.tuple(fc.constant(p), requestsArb(p.kvCapacityTokens, 24), fc.array(opArb, { maxLength: 30 }))),
        ([profile, pool, ops]) => {
          const { core, leap, engine } = play(profile, pool, ops);
          expect(leap.finished).toEqual(core.finished);
          expect(leap.admitted).toEqual(core.admitted);
          expect(leap.preempted).toEqual(core.preempted);
          expect(leap.removed).toEqual(core.removed);
          expect(leap.loads).toEqual(core.loads);
          // Everything finished exactly once, and the engine is empty.
          expect(core.finished.map((f) => f.id).sort((a, b) => a - b)).toEqual(pool.map((r) => r.id));
          expect(engine.idle).toBe(true);
          expect(engine.kvUsedTokens).toBe(0);
          expect(engine.nextEventAt()).toBe(Number.POSITIVE_INFINITY);
          // Every step EngineCore made, LeapEngine made (one by one or leaped), each with a token per running request.
          expect(engine.stats.steps).toBe(core.loads.length);
          expect(engine.stats.eventSteps + engine.stats.leapedSteps).toBe(engine.stats.steps);
          expect(engine.stats.finished).toBe(pool.length);
          steps += engine.stats.steps;
          leaped += engine.stats.leapedSteps;
          if (core.preempted.length > 0) preempting++;
          if (core.removed.some(([, generated]) => generated > 0)) removing++;
          if (profile.kvReadMsPerMToken! > 0 && engine.stats.leapedSteps > 0) reading++;
          if (profile.eagerFloorMs! > profile.decodeStepMs && profile.kvReadMsPerMToken! > 0 && engine.stats.leapedSteps > 0) flooring++;
        },
      ),
      // A fixed seed: the coverage counts below are claims about these 300 cases, and with a fresh
      // seed each run they are only likely (a clean-clone run drew exactly 20 removing cases).
      { numRuns: 300, seed: COVERAGE_SEED },
    );
    // The cases exercise what they claim to: preemption, removal of half-generated requests,
    // the KV-read term, an eager floor above the decode step with the KV read lifting steps over
    // it, and leaps over most steps.
    expect(preempting).toBeGreaterThan(100);
    expect(removing).toBeGreaterThan(20);
    expect(reading).toBeGreaterThan(150);
    expect(flooring).toBeGreaterThan(50);
    expect(leaped / steps).toBeGreaterThan(0.5);
  });
});

describe('LeapEngine', () => {
  const profile: EngineProfile = {
    kvCapacityTokens: 1000,
    rooflineBatch: 4,
    maxRunning: 8,
    decodeStepMs: 10,
    prefillMsPerToken: 0.5,
    slopeBeyondRoofline: 1,
    kvReadMsPerMToken: 0,
  };
  const quiet = { finished: (): void => {} };

  it('crosses a run of plain steps in one event: two requests of 100 and 300 tokens', () => {
    const finished: Timed[] = [];
    const engine = new LeapEngine(profile, { finished: (id, at) => finished.push({ id, at }) });
    engine.submit(
      [
        { id: 1, promptTokens: 10, targetTokens: 100, generated: 0 },
        { id: 2, promptTokens: 20, targetTokens: 300, generated: 0 },
      ],
      0,
    );
    // The first step admits both (prefill 30 tokens at 0.5 ms) and decodes: 25 ms.
    expect(engine.nextEventAt()).toBe(0);
    engine.wake(0);
    // Then 98 plain steps to the step in which request 1 finishes: one wake, not 98.
    expect(engine.nextEventAt()).toBe(25 + 98 * 10);
    engine.wake(engine.nextEventAt());
    expect(engine.nextEventAt()).toBe(25 + 99 * 10);
    engine.wake(engine.nextEventAt());
    expect(finished).toEqual([{ id: 1, at: 25 + 99 * 10 }]);
    // Halfway through request 2's lone run, its load is a closed form.
    expect(engine.loadAt(1015 + 50 * 10)).toEqual({ kvUsed: 20 + 100 + 50, running: 1, waiting: 0 });
    for (let next = engine.nextEventAt(); next < Infinity; next = engine.nextEventAt()) engine.wake(next);
    expect(finished.at(-1)).toEqual({ id: 2, at: 25 + 299 * 10 });
    expect(engine.stats).toMatchObject({ steps: 300, eventSteps: 3, leapedSteps: 297, tokens: 400, admissions: 2, finished: 2, busyMs: 25 + 299 * 10 });
  });

  it('idles until work arrives, and starts its next step then', () => {
    const engine = new LeapEngine(profile, quiet, 100);
    expect(engine.idle).toBe(true);
    expect(engine.nextEventAt()).toBe(Infinity);
    engine.submit([{ id: 5, promptTokens: 1, targetTokens: 1, generated: 0 }], 250);
    expect(engine.nextEventAt()).toBe(250);
  });

  it('gives back removed requests with their tokens so far, and resumes them with a re-prefill', () => {
    const engine = new LeapEngine(profile, quiet);
    engine.submit([{ id: 1, promptTokens: 10, targetTokens: 100, generated: 0 }], 0);
    engine.wake(0);
    // Steps start at 0, 15, 25, 35, ...: by 40 four have started, the one at 35 still in progress.
    expect(engine.remove([1, 1, 99], 40)).toEqual([{ id: 1, promptTokens: 10, targetTokens: 100, generated: 4 }]);
    expect(engine.idle).toBe(true);
    expect(engine.kvUsedTokens).toBe(0);
    engine.submit([{ id: 1, promptTokens: 10, targetTokens: 100, generated: 4 }], 45);
    engine.wake(engine.nextEventAt());
    expect(engine.stats.prefillTokens).toBe(10 + 14);
    expect(engine.drain(50)).toEqual([{ id: 1, promptTokens: 10, targetTokens: 100, generated: 5 }]);
  });

  it('refuses bad requests, time going back, a listener calling in, and a load read past its next event', () => {
    const engine = new LeapEngine(profile, quiet);
    const code = (f: () => unknown): string | undefined => {
      try {
        f();
      } catch (err) {
        return (err as { code?: string }).code;
      }
      return undefined;
    };
    const ok = { id: 1, promptTokens: 10, targetTokens: 10, generated: 0 };
    expect(code(() => engine.submit([{ ...ok, id: -1 }], 0))).toBe(ErrorCodes.INVALID_ARG);
    expect(code(() => engine.submit([{ ...ok, promptTokens: 0 }], 0))).toBe(ErrorCodes.INVALID_ARG);
    expect(code(() => engine.submit([{ ...ok, generated: 10 }], 0))).toBe(ErrorCodes.INVALID_ARG);
    expect(code(() => engine.submit([{ ...ok, targetTokens: 991 }], 0))).toBe(ErrorCodes.INVALID_ARG);
    engine.submit([ok], 10);
    expect(code(() => engine.submit([ok], 10))).toBe(ErrorCodes.INVALID_ARG);
    expect(code(() => engine.advanceTo(5))).toBe(ErrorCodes.SIM_PAST_EVENT);
    expect(code(() => engine.loadAt(11))).toBe(ErrorCodes.INTERNAL);
    expect(() => new LeapEngine({ ...profile, kvReadMsPerMToken: -1 }, quiet)).toThrow(/kvReadMsPerMToken/);

    const reentrant: LeapEngine = new LeapEngine(profile, { finished: () => reentrant.submit([{ ...ok, id: 2 }], 1e6) });
    reentrant.submit([{ ...ok, targetTokens: 1 }], 0);
    reentrant.wake(0);
    expect(code(() => reentrant.wake(reentrant.nextEventAt()))).toBe(ErrorCodes.INTERNAL);
  });
});
