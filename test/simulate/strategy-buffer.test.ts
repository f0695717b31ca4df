/**
 * The simulated trainer's buffer (src/simulate/trainer/strategy-buffer.ts) is the sampler's own
 * machinery: the real strategies over a BufferIndex, with the context the sampler's books build.
 * fifo hands out the oldest completions, a staleness bound drops what is too stale and reports
 * each drop once (the ledger's count), and whole groups wait for a group's last member.
 */
import { describe, expect, it } from 'vitest';
import { strategyByName } from '../../src/data/experience/strategies/by-name.js';
import { strategyContext } from '../../src/data/experience/strategies/context.js';
import type { BufferEntry } from '../../src/data/experience/entry.js';
import { StrategyBuffer, type CompletedTrajectory } from '../../src/simulate/trainer/strategy-buffer.js';

const GROUP = 2;
const done = (id: number, weightVersion: number): CompletedTrajectory => ({
  id,
  prompt: Math.floor(id / GROUP),
  sampleIndex: id % GROUP,
  groupSize: GROUP,
  weightVersion,
  promptTokens: 10,
  responseTokens: 20,
  completedAtMs: id,
});
const random = (): number => 0.5;

describe('StrategyBuffer', () => {
  it('fifo: the oldest completions, nothing until a batch is there', () => {
    const buffer = new StrategyBuffer(strategyByName('fifo', null), random, () => expect.unreachable());
    for (const id of [5, 2, 9]) buffer.push(done(id, 0));
    expect(buffer.take(4, 0)).toBeNull();
    expect([...buffer.take(2, 0)!]).toEqual([5, 2]);
    expect(buffer.size).toBe(1);
  });

  it('a staleness bound drops the too stale once, and trains the fresh', () => {
    const dropped: number[] = [];
    const buffer = new StrategyBuffer(strategyByName('fifo', 1), random, (id) => dropped.push(id));
    buffer.push(done(0, 0));
    buffer.push(done(1, 2));
    buffer.push(done(2, 1));
    expect(buffer.take(2, 3)).toBeNull();
    expect(dropped).toEqual([0, 2]);
    expect(buffer.size).toBe(1);
    buffer.push(done(3, 3));
    expect([...buffer.take(2, 3)!]).toEqual([1, 3]);
    expect(dropped).toEqual([0, 2]);
  });

  it('whole groups: only complete groups make a batch', () => {
    const buffer = new StrategyBuffer(strategyByName('groups', null), random, () => expect.unreachable());
    for (const id of [0, 2, 4]) buffer.push(done(id, 0));
    expect(buffer.take(2, 0)).toBeNull();
    buffer.push(done(3, 0));
    expect([...buffer.take(2, 0)!]).toEqual([2, 3]);
  });
});

describe('strategyContext', () => {
  it('measures staleness against the trainer’s version, never below 0, and passes drops on', () => {
    const drops: string[] = [];
    const ctx = strategyContext(5, random, new Map(), (e, reason) => drops.push(`${e.id}:${reason}`));
    expect(ctx.trainerVersion).toBe(5);
    expect(ctx.staleness({ weightVersion: 3 } as BufferEntry)).toBe(2);
    expect(ctx.staleness({ weightVersion: 7 } as BufferEntry)).toBe(0);
    ctx.drop({ id: 'x' } as BufferEntry, 'stale');
    expect(drops).toEqual(['x:stale']);
  });
});
