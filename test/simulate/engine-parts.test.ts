/**
 * The parts LeapEngine is built from: the closed forms of a growth run against step-by-step sums
 * of EngineCore's stepMs, the finish heap against a sorted list, and the request list against an
 * array, under random operations.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stepMs, type EngineProfile } from '../../src/stand-ins/engine-core.js';
import { FinishHeap } from '../../src/simulate/engine/finish-heap.js';
import { growthRunKvMs, growthRunMs, growthStepsStarted } from '../../src/simulate/engine/growth.js';
import { EngineRequest } from '../../src/simulate/engine/request.js';
import { RequestList } from '../../src/simulate/engine/request-list.js';

const profileArb: fc.Arbitrary<EngineProfile> = fc.record({
  kvCapacityTokens: fc.constant(2_000_000),
  rooflineBatch: fc.integer({ min: 1, max: 512 }),
  maxRunning: fc.constant(1024),
  decodeStepMs: fc.double({ min: 0.5, max: 60, noNaN: true }),
  prefillMsPerToken: fc.double({ min: 0, max: 0.1, noNaN: true }),
  slopeBeyondRoofline: fc.double({ min: 0, max: 2, noNaN: true }),
  kvReadMsPerMToken: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 40, noNaN: true })),
  // An eager engine's floor (mechanism eagerDecode), often above the decode step so that a run
  // starts at the floor and the KV read lifts it over.
  eagerFloorMs: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 120, noNaN: true })),
});

describe('growth runs', () => {
  it('take as long as their steps one by one, and the KV-time integral adds up the same', () => {
    fc.assert(
      fc.property(
        profileArb,
        fc.integer({ min: 1, max: 1024 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.integer({ min: 0, max: 300 }),
        (p, running, extra, steps) => {
          const kvStart = running + extra;
          let ms = 0;
          let kvMs = 0;
          for (let j = 0; j < steps; j++) {
            const kv = kvStart + j * running;
            const one = stepMs(p, running, 0, kv);
            ms += one;
            kvMs += kv * one;
          }
          expect(growthRunMs(p, running, kvStart, steps)).toBeCloseTo(ms, 6);
          if (steps > 0) expect(Math.abs(growthRunKvMs(p, running, kvStart, steps) / kvMs - 1)).toBeLessThan(1e-9);
        },
      ),
    );
  });

  it('count the steps started by a time exactly as the engine places them, before or at it', () => {
    fc.assert(
      fc.property(
        profileArb,
        fc.integer({ min: 1, max: 1024 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.integer({ min: 0, max: 200 }),
        fc.double({ min: 0, max: 1e6, noNaN: true }),
        fc.double({ min: -0.2, max: 1.2, noNaN: true }),
        fc.boolean(),
        (p, running, extra, maxSteps, runStart, where, onBoundary) => {
          const kvStart = running + extra;
          const startOf = (j: number): number => runStart + growthRunMs(p, running, kvStart, j);
          // A time somewhere in (or around) the run, or exactly on one of its step boundaries.
          const t = onBoundary ? startOf(Math.max(0, Math.floor(where * maxSteps))) : startOf(maxSteps) * where + runStart * (1 - where);
          for (const inclusive of [false, true]) {
            let brute = 0;
            while (brute < maxSteps && (inclusive ? startOf(brute) <= t : startOf(brute) < t)) brute++;
            expect(growthStepsStarted(p, running, kvStart, maxSteps, runStart, t, inclusive)).toBe(brute);
          }
        },
      ),
    );
  });
});

describe('FinishHeap', () => {
  it('gives the earliest finish first, ties in admission order, through removals from the middle', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.record({ push: fc.integer({ min: 0, max: 20 }) }), fc.record({ remove: fc.nat() }), fc.constant('pop' as const)), {
          maxLength: 200,
        }),
        (ops) => {
          const heap = new FinishHeap();
          let model: EngineRequest[] = [];
          let seq = 0;
          const order = (a: EngineRequest, b: EngineRequest): number => a.finishStep - b.finishStep || a.admitSeq - b.admitSeq;
          for (const op of ops) {
            if (op === 'pop') {
              model.sort(order);
              const expected = model.shift();
              const got = heap.pop();
              expect(got).toBe(expected);
              if (got) expect(got.heapIndex).toBe(-1);
            } else if ('push' in op) {
              const r = new EngineRequest(seq, 1, 1, 0);
              r.finishStep = op.push;
              r.admitSeq = seq++;
              heap.push(r);
              model.push(r);
            } else if (model.length > 0) {
              const r = model[op.remove % model.length]!;
              heap.remove(r);
              model = model.filter((x) => x !== r);
            }
            expect(heap.size).toBe(model.length);
            expect(heap.peek()).toBe([...model].sort(order)[0]);
          }
        },
      ),
    );
  });
});

describe('RequestList', () => {
  it('behaves as an array under pushes and pops at both ends and removals from the middle', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.constantFrom('pushBack', 'pushFront', 'popBack', 'popFront'), fc.nat()), { maxLength: 200 }), (ops) => {
        const list = new RequestList();
        let model: EngineRequest[] = [];
        let id = 0;
        for (const op of ops) {
          if (op === 'pushBack' || op === 'pushFront') {
            const r = new EngineRequest(id++, 1, 1, 0);
            list[op](r);
            if (op === 'pushBack') model.push(r);
            else model.unshift(r);
          } else if (op === 'popBack') {
            expect(list.popBack()).toBe(model.pop() ?? null);
          } else if (op === 'popFront') {
            expect(list.popFront()).toBe(model.shift() ?? null);
          } else if (model.length > 0) {
            const r = model[op % model.length]!;
            list.remove(r);
            model = model.filter((x) => x !== r);
          }
          expect([...list]).toEqual(model);
          expect(list.size).toBe(model.length);
          expect(list.head).toBe(model[0] ?? null);
          expect(list.tail).toBe(model.at(-1) ?? null);
        }
      }),
    );
  });
});
