/** The simulator's event queue: a binary min-heap by (time, insertion order). */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { EventQueue } from '../../src/simulate/core/event-queue.js';

/** Pops everything, with the time each came out at. */
function drain<T>(q: EventQueue<T>): { time: number; item: T }[] {
  const out: { time: number; item: T }[] = [];
  while (q.size > 0) {
    const time = q.peekTime();
    out.push({ time, item: q.pop()! });
  }
  return out;
}

describe('EventQueue', () => {
  it('is empty at first: size 0, peekTime Infinity, pop undefined', () => {
    const q = new EventQueue<string>();
    expect(q.size).toBe(0);
    expect(q.peekTime()).toBe(Number.POSITIVE_INFINITY);
    expect(q.pop()).toBeUndefined();
  });

  it('pops in time order', () => {
    const q = new EventQueue<string>(2);
    for (const [t, name] of [
      [30, 'c'],
      [10, 'a'],
      [20, 'b'],
      [5, 'z'],
    ] as const)
      q.push(t, name);
    expect(drain(q)).toEqual([
      { time: 5, item: 'z' },
      { time: 10, item: 'a' },
      { time: 20, item: 'b' },
      { time: 30, item: 'c' },
    ]);
  });

  it('keeps insertion order among equal times, across growth', () => {
    const q = new EventQueue<number>(1);
    for (let i = 0; i < 100; i++) q.push(7, i);
    expect(drain(q).map((e) => e.item)).toEqual(Array.from({ length: 100 }, (_, i) => i));
  });

  it('equals a stable sort by time for any sequence of pushes and pops (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.record({ push: fc.integer({ min: 0, max: 20 }) }), fc.constant({ pop: true as const })), { maxLength: 300 }), (ops) => {
        const q = new EventQueue<number>(1);
        // The model: a list kept sorted by (time, sequence).
        const model: { time: number; seq: number }[] = [];
        let seq = 0;
        for (const op of ops) {
          if ('push' in op) {
            q.push(op.push, seq);
            model.push({ time: op.push, seq });
            model.sort((a, b) => a.time - b.time || a.seq - b.seq);
            seq++;
          } else {
            const expected = model.shift();
            expect(q.peekTime()).toBe(expected?.time ?? Number.POSITIVE_INFINITY);
            expect(q.pop()).toBe(expected?.seq);
          }
          expect(q.size).toBe(model.length);
        }
        expect(drain(q).map((e) => e.item)).toEqual(model.map((m) => m.seq));
      }),
    );
  });

  it('refuses a time that is not a finite number, with ERR_SIM_PAST_EVENT', () => {
    const q = new EventQueue<string>();
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      expect(() => q.push(bad, 'x')).toThrow(expect.objectContaining({ code: ErrorCodes.SIM_PAST_EVENT }));
    }
    expect(q.size).toBe(0);
  });

  it('clear() empties it and later pushes still keep insertion order', () => {
    const q = new EventQueue<string>();
    q.push(1, 'a');
    q.push(2, 'b');
    q.clear();
    expect(q.size).toBe(0);
    expect(q.pop()).toBeUndefined();
    q.push(3, 'c');
    q.push(3, 'd');
    expect(drain(q).map((e) => e.item)).toEqual(['c', 'd']);
  });
});
