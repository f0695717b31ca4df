/**
 * The prompt pool's claim order (issue #49): a longest-first pool hands out the pending prompt whose
 * group ran longest when last recorded, so that a step's long tail starts first; fifo keeps the
 * dataset's order. The lengths are the pool's history of each prompt, kept across epochs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { PromptPool, type ClaimOrder } from '../../src/data/index.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { promptPoolFixture, redisClient } from './helpers.js';

const fx = promptPoolFixture('order');
let redis: Redis;
beforeAll(() => {
  redis = redisClient(fx.server.port);
});
afterAll(() => redis.disconnect());

/** A second handle on `pool` that claims in `claimOrder` (the order is each client's own). */
const handle = (pool: PromptPool, claimOrder: ClaimOrder): Promise<PromptPool> => PromptPool.open({ redis, name: pool.name, claimOrder });

const load = (pool: PromptPool, ids: string[]): Promise<unknown> => pool.load(ids.map((id) => ({ id, payload: { text: id }, n: 1 })));

/** Claims (and completes) `count` prompts one at a time: their ids in the order they came. */
async function drain(pool: PromptPool, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const [c] = await pool.claim('r', 1);
    if (!c) break;
    ids.push(c.id);
    await pool.complete(c);
  }
  return ids;
}

describe('prompt pool claim order', () => {
  it("longest-first claims the next epoch's prompts by their groups' lengths, longest first, fifo among equals", async () => {
    const fifo = await fx.open({ epochs: 3, n: 1 });
    await load(fifo, ['q0', 'q1', 'q2', 'q3', 'q4']);
    // Epoch 0: nothing recorded yet, both orders are the dataset's.
    expect(await drain(await handle(fifo, 'longest-first'), 5)).toEqual(['q0', 'q1', 'q2', 'q3', 'q4']);
    const ran = { q0: 10, q1: 50, q2: 30, q3: 50, q4: 5 };
    for (const [id, tokens] of Object.entries(ran)) await fifo.recordLength(`${id}#0`, tokens);
    // A shorter trajectory of the same group leaves its group's length at the longest.
    expect(await fifo.recordLength('q2#0', 20)).toBe(30);
    expect(Object.fromEntries(await fifo.lengths())).toEqual(ran);
    expect(await drain(await handle(fifo, 'longest-first'), 5)).toEqual(['q1', 'q3', 'q2', 'q0', 'q4']);
    // The same history, a fifo claimer: the dataset's order.
    expect(await drain(fifo, 5)).toEqual(['q0', 'q1', 'q2', 'q3', 'q4']);
  });

  it('a prompt never recorded counts as the mean of those recorded', async () => {
    const pool = await handle(await fx.open({ n: 1 }), 'longest-first');
    await load(pool, ['short', 'new', 'long', 'newer']);
    await pool.recordLength('short#0', 10);
    await pool.recordLength('long#0', 30);
    // The unknown two count as 20: after the long one, before the short one, fifo between them.
    expect(await drain(pool, 4)).toEqual(['long', 'new', 'newer', 'short']);
  });

  it("a fresh claim carries its prompt's recorded length, for the rollout's progressive priority", async () => {
    const pool = await fx.open({ n: 1 });
    await load(pool, ['ran', 'never']);
    await pool.recordLength('ran#0', 42);
    const claims = await pool.claim('r', 2);
    expect(claims.map((c) => [c.id, c.lastLength])).toEqual([
      ['ran', 42],
      ['never', undefined],
    ]);
    expect('lastLength' in claims[1]!).toBe(false);
  });

  it("a newer epoch's length replaces an older one's; an older one's record is ignored", async () => {
    const pool = await fx.open({ n: 1 });
    expect(await pool.recordLength('p#0', 50)).toBe(50);
    expect(await pool.recordLength('p#1', 5)).toBe(5);
    expect(await pool.recordLength('p#0', 100)).toBe(5);
    expect(await pool.lengths()).toEqual(new Map([['p', 5]]));
  });

  it('returned samples still go before fresh prompts, and an expired lease comes back in order', async () => {
    const pool = await handle(await fx.open({ n: 2 }), 'longest-first');
    await pool.load([
      { id: 'a', payload: {}, n: 2 },
      { id: 'b', payload: {}, n: 2 },
      { id: 'c', payload: {}, n: 2 },
    ]);
    for (const [id, tokens] of [
      ['a', 10],
      ['b', 5],
      ['c', 40],
    ] as const)
      await pool.recordLength(`${id}#0`, tokens);
    const [c] = await pool.claim('r', 1);
    expect(c!.id).toBe('c');
    await pool.complete(c!);
    await pool.returnSamples({ groupId: 'c#0', samples: [1] });
    const next = await pool.claim('r', 2);
    expect(next.map((x) => [x.id, x.returned === true])).toEqual([
      ['c', true],
      ['a', false],
    ]);
  });

  it('bad input is refused with a code', async () => {
    const pool = await fx.open();
    await expect(pool.recordLength('no-epoch', 5)).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_GROUP });
    await expect(pool.recordLength('p#0', -1)).rejects.toMatchObject({ code: ErrorCodes.BAD_DATA_OPTIONS });
    await expect(pool.recordLength('p#0', 1.5)).rejects.toMatchObject({ code: ErrorCodes.BAD_DATA_OPTIONS });
    await expect(PromptPool.open({ redis, name: pool.name, claimOrder: 'random' as ClaimOrder })).rejects.toMatchObject({
      code: ErrorCodes.BAD_DATA_OPTIONS,
    });
  });
});
