/** The rollout agent's places at the engine (src/rollout-agent/engine-slots.ts): a bounded line, first come first served or by priority. */
import { describe, expect, it } from 'vitest';
import { EngineSlots } from '../../src/rollout-agent/engine-slots.js';

const never = new AbortController().signal;

describe('EngineSlots', () => {
  it('admits up to the limit at once, then the one that has waited longest first', async () => {
    const slots = new EngineSlots(2);
    expect(await slots.acquire(never)).toBe(true);
    expect(await slots.acquire(never)).toBe(true);
    const admitted: string[] = [];
    const line = ['first', 'second', 'third'].map((name) => slots.acquire(never).then((ok) => ok && admitted.push(name)));
    expect([slots.inUse, slots.waiting]).toEqual([2, 3]);
    slots.release();
    await line[0];
    expect(admitted).toEqual(['first']);
    slots.release();
    slots.release();
    await Promise.all(line);
    expect(admitted).toEqual(['first', 'second', 'third']);
    expect([slots.inUse, slots.waiting]).toEqual([2, 0]);
    slots.release();
    slots.release();
    expect(slots.inUse).toBe(0);
  });

  it('a newcomer does not pass the line, even when a place is free at the moment it asks', async () => {
    const slots = new EngineSlots(1);
    await slots.acquire(never);
    const order: string[] = [];
    const waiting = slots.acquire(never).then(() => order.push('waited'));
    slots.release(); // handed to the one in line, not freed
    const newcomer = slots.acquire(never).then(() => order.push('newcomer'));
    await waiting;
    expect(slots.waiting).toBe(1);
    slots.release();
    await newcomer;
    expect(order).toEqual(['waited', 'newcomer']);
  });

  it('a trajectory stopped while in line leaves it and takes no place', async () => {
    const slots = new EngineSlots(1);
    await slots.acquire(never);
    const stop = new AbortController();
    const stopped = slots.acquire(stop.signal);
    const next = slots.acquire(never);
    stop.abort();
    expect(await stopped).toBe(false);
    expect(slots.waiting).toBe(1);
    slots.release();
    expect(await next).toBe(true);
    expect(slots.inUse).toBe(1);
    expect(await slots.acquire(stop.signal)).toBe(false);
  });

  it('with priorities, the largest is admitted first, first come first served among equals', async () => {
    const slots = new EngineSlots(1);
    await slots.acquire(never);
    const admitted: string[] = [];
    const asks: [string, number][] = [
      ['short', 10],
      ['long', 300],
      ['unknown', 0],
      ['medium', 120],
      ['long too', 300],
    ];
    const line = asks.map(([name, priority]) => slots.acquire(never, priority).then(() => admitted.push(name)));
    // Every release hands the place to the head of the line as it is then.
    for (let i = 0; i < asks.length; i++) slots.release();
    await Promise.all(line);
    expect(admitted).toEqual(['long', 'long too', 'medium', 'short', 'unknown']);
  });

  it('limit 0 admits everyone at once (batch mode)', async () => {
    const slots = new EngineSlots(0);
    const all = await Promise.all(Array.from({ length: 100 }, () => slots.acquire(never)));
    expect(all.every(Boolean)).toBe(true);
    expect([slots.inUse, slots.waiting]).toEqual([100, 0]);
  });
});
