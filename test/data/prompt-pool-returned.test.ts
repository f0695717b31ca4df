/**
 * Returned samples: the manager's failover sends some samples of an issued GRPO group back for
 * regeneration. They are claimed before fresh prompts, keep their group id and epoch, complete
 * exactly once under their own tokens and leases, and never touch the fresh prompts' epochs.
 */
import { describe, expect, it } from 'vitest';
import { PromptPool, type PromptClaim } from '../../src/data/index.js';
import { DataInputError } from '../../src/data/errors.js';
import { metricValue, promptPoolFixture } from './helpers.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const fx = promptPoolFixture('r');

async function pool(opts: { epochs?: number; leaseMs?: number; n?: number; prompts?: number } = {}): Promise<PromptPool> {
  const p = await fx.open(opts);
  await p.load(Array.from({ length: opts.prompts ?? 2 }, (_, i) => ({ id: `q${i}`, payload: { text: `question ${i}` } })));
  return p;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const shape = (c: PromptClaim): unknown[] => [c.id, c.groupId, c.epoch, c.samples, c.returned];

describe('PromptPool returned samples', () => {
  it('serves returned samples before fresh prompts, with their original group id and epoch', async () => {
    const p = await pool({ epochs: 2 });
    for (const c of await p.claim('r', 2)) expect(await p.complete(c)).toBe('ok');
    const [q0e1] = await p.claim('r', 1); // epoch 1 has begun
    expect(shape(q0e1!)).toEqual(['q0', 'q0#1', 1, undefined, undefined]);

    // Samples of epoch-0 groups come back (a failover gave up on them).
    await p.returnSamples({ groupId: 'q1#0', samples: [3, 1] });
    await p.returnSamples({ groupId: 'q0#0', samples: [2], reason: 'stale_weights' });
    expect(await p.progress()).toMatchObject({ returnedPending: 2, returnedLeased: 0, returnedEntries: 2, returnedSamples: 3, finished: false });

    const got = await p.claim('r2', 3);
    expect(got.map(shape)).toEqual([
      ['q1', 'q1#0', 0, [1, 3], true],
      ['q0', 'q0#0', 0, [2], true],
      ['q1', 'q1#1', 1, undefined, undefined], // then a fresh prompt for the rest of the count
    ]);
    expect(got[0]).toMatchObject({ payload: { text: 'question 1' }, n: 4 });
    expect(got[0]!.deadline).toBeGreaterThan(Date.now() - 60_000);
    expect('samples' in got[2]!).toBe(false);
    // The writer's group check accepts the old group id.
    expect(await p.groupSize('q1#0')).toBe(4);

    expect(await p.progress()).toMatchObject({ epoch: 1, returnedPending: 0, returnedLeased: 2, leased: 2, claims: 4, returnedClaims: 2 });
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_samples_total', { reason: 'failover' })).toBe(2);
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_samples_total', { reason: 'stale_weights' })).toBe(1);
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_claims_total')).toBe(4); // fresh claims only
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_claims_total', { event: 'claimed' })).toBe(2);
  });

  it('a fresh claim of the same prompt in a later epoch does not collide with a returned claim', async () => {
    const p = await pool({ epochs: 2, prompts: 1 });
    const [e0] = await p.claim('r', 1);
    expect(await p.complete(e0!)).toBe('ok');
    await p.returnSamples({ groupId: 'q0#0', samples: [0] });
    const [ret, fresh] = await p.claim('a', 2);
    expect(shape(ret!)).toEqual(['q0', 'q0#0', 0, [0], true]);
    expect(shape(fresh!)).toEqual(['q0', 'q0#1', 1, undefined, undefined]);
    await p.returnSamples({ groupId: 'q0#0', samples: [1] });
    const [ret2] = await p.claim('b', 1);
    expect(shape(ret2!)).toEqual(['q0', 'q0#0', 0, [1], true]);

    // Tokens, leases and holders are separate: giving back / completing one leaves the others be.
    await p.giveBack(ret2!);
    expect(await p.extend(fresh!, 5000)).toBeGreaterThan(0);
    expect(await p.extend(ret!, 5000)).toBeGreaterThan(0);
    expect(await p.complete(fresh!)).toBe('ok');
    expect(await p.progress()).toMatchObject({
      doneThisEpoch: 1,
      leased: 0,
      pending: 0,
      completions: 2,
      returnedLeased: 1,
      returnedPending: 1,
      finished: false,
    });
    expect(await p.complete(ret!)).toBe('ok');
    // The fresh token cannot complete the returned claim or the other way round.
    await expect(p.complete({ ...fresh!, returned: true })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_CLAIM });
    // A returned claim that lost its flag in transit is still recognised by its token.
    expect(await p.complete({ ...ret!, returned: undefined })).toBe('duplicate');
    expect(await p.progress()).toMatchObject({ duplicates: 0, returnedDuplicates: 1 });
    const [again] = await p.claim('c', 5);
    expect(shape(again!)).toEqual(['q0', 'q0#0', 0, [1], true]);
    expect(await p.complete(again!)).toBe('ok');
    // Epoch counting saw only the fresh claims.
    expect(await p.progress()).toMatchObject({ epoch: 1, completions: 2, claims: 2, returnedCompletions: 2, returnedSamplesCompleted: 2, finished: true });
    expect(await p.claim('d', 1)).toEqual([]);
  });

  it('returned work of an earlier epoch does not block the next epoch', async () => {
    const p = await pool({ epochs: 3, prompts: 2 });
    const e0 = await p.claim('r', 2);
    for (const c of e0) await p.complete(c);
    await p.returnSamples({ groupId: 'q0#0', samples: [0, 1, 2, 3] });
    const [ret] = await p.claim('r', 1);
    expect(ret!.returned).toBe(true);
    // Still leased: the fresh prompts move on to epoch 1 regardless.
    const e1 = await p.claim('r', 5);
    expect(e1.map((c) => c.groupId)).toEqual(['q0#1', 'q1#1']);
    for (const c of e1) await p.complete(c);
    expect((await p.claim('r', 1)).map((c) => c.groupId)).toEqual(['q0#2']);
    expect(await p.complete(ret!)).toBe('ok');
  });

  it('completes a returned claim exactly once', async () => {
    const p = await pool();
    await p.returnSamples({ groupId: 'q0#0', samples: [0, 2] });
    const [c] = await p.claim('r', 1);
    const results = await Promise.all(Array.from({ length: 10 }, () => p.complete(c!)));
    expect(results.filter((r) => r === 'ok')).toHaveLength(1);
    expect(results.filter((r) => r === 'duplicate')).toHaveLength(9);
    expect(await p.progress()).toMatchObject({
      returnedCompletions: 1,
      returnedDuplicates: 9,
      returnedSamplesCompleted: 2,
      returnedLeased: 0,
      returnedPending: 0,
      completions: 0,
      doneThisEpoch: 0,
    });
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_claims_total', { event: 'completed' })).toBe(1);
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_completions_total')).toBe(0);
    await expect(p.giveBack(c!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    await expect(p.extend(c!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    // Tokens that were never issued.
    await expect(p.complete({ id: 'q0', token: '999:1', epoch: 0, returned: true })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_CLAIM });
    await expect(p.complete({ id: 'q0', token: 'forged', epoch: 0, returned: true })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_CLAIM });
    // Nothing else to claim of the returned work; the fresh prompts are untouched.
    expect((await p.claim('r', 5)).map((x) => [x.groupId, x.returned])).toEqual([
      ['q0#0', undefined],
      ['q1#0', undefined],
    ]);
  });

  it('an expired returned lease goes back to the front of the returned FIFO', async () => {
    const p = await pool();
    await p.returnSamples({ groupId: 'q0#0', samples: [1] });
    await p.returnSamples({ groupId: 'q1#0', samples: [2] });
    const [slow] = await p.claim('slow', 1, 100);
    expect(slow!.groupId).toBe('q0#0');
    await sleep(250);
    const [fast, next] = await p.claim('fast', 2);
    expect([fast!.groupId, fast!.samples, next!.groupId]).toEqual(['q0#0', [1], 'q1#0']);
    expect(fast!.token).not.toBe(slow!.token);
    await expect(p.complete(slow!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    await expect(p.extend(slow!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    expect(await p.complete(fast!)).toBe('ok');
    expect(await p.progress()).toMatchObject({ returnedExpired: 1, expired: 0, returnedLeased: 1 });
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_claims_total', { event: 'expired' })).toBe(1);
  });

  it('an expired returned lease not yet claimed again still completes, once, and leaves the FIFO', async () => {
    const p = await pool();
    await p.returnSamples({ groupId: 'q0#0', samples: [3] });
    await p.returnSamples({ groupId: 'q1#0', samples: [0] });
    const [a, b] = await p.claim('slow', 2, 50);
    await sleep(150);
    // This claim sends both expired entries back to the front of the FIFO and takes the first.
    const [x] = await p.claim('x', 1);
    expect([x!.groupId, x!.samples]).toEqual(['q0#0', [3]]);
    expect(await p.progress()).toMatchObject({ returnedPending: 1, returnedLeased: 1, returnedExpired: 2 });
    await expect(p.complete(a!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    // b ran out but nobody claimed it again: its holder still completes it, once.
    expect(await p.complete(b!)).toBe('ok');
    expect(await p.complete(b!)).toBe('duplicate');
    expect(await p.progress()).toMatchObject({ returnedPending: 0, returnedLeased: 1, returnedCompletions: 1 });
    expect((await p.claim('y', 5)).map((c) => [c.groupId, c.returned])).toEqual([
      ['q0#0', undefined],
      ['q1#0', undefined],
    ]);
    expect(await p.complete(x!)).toBe('ok');
  });

  it('giveBack and giveBackRollout return returned claims to the front, fenced', async () => {
    const p = await pool({ prompts: 4 });
    for (let i = 0; i < 3; i++) await p.returnSamples({ groupId: `q${i}#0`, samples: [i] });
    const mine = await p.claim('dead', 4); // 3 returned + 1 fresh
    expect(mine.map((c) => [c.groupId, c.returned])).toEqual([
      ['q0#0', true],
      ['q1#0', true],
      ['q2#0', true],
      ['q0#0', undefined],
    ]);
    await p.returnSamples({ groupId: 'q3#0', samples: [3] }); // waits behind the given-back ones
    await p.giveBack(mine[0]!);
    await expect(p.complete(mine[0]!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    await expect(p.giveBack(mine[0]!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    await expect(p.extend(mine[0]!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    expect(await p.giveBackRollout('dead')).toBe(3); // 2 returned + 1 fresh
    for (const c of mine.slice(1)) await expect(p.complete(c)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    expect(await p.progress()).toMatchObject({ returnedGivenBack: 3, returned: 1, returnedPending: 4, returnedLeased: 0, pending: 4, leased: 0 });
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_claims_total', { event: 'given_back' })).toBe(1);
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_claims_total', { event: 'failover' })).toBe(2);
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_total', { reason: 'failover' })).toBe(1);

    const again = await p.claim('alive', 10);
    const returned = again.filter((c) => c.returned);
    expect(again.slice(0, 4).every((c) => c.returned)).toBe(true);
    expect(returned.map((c) => c.groupId).sort()).toEqual(['q0#0', 'q1#0', 'q2#0', 'q3#0']);
    expect(returned.at(-1)!.groupId).toBe('q3#0'); // given-back ones went to the front
    for (const c of again) expect(await p.complete(c)).toBe('ok');
    expect(await p.progress()).toMatchObject({ finished: true, returnedCompletions: 4, completions: 4 });
  });

  it('refuses bad input with typed, counted errors and queues nothing', async () => {
    const p = await pool({ epochs: 2 });
    const cases: Array<[string, unknown, string]> = [
      ['empty samples', { groupId: 'q0#0', samples: [] }, ErrorCodes.BAD_DATA_OPTIONS],
      ['samples not an array', { groupId: 'q0#0', samples: 1 }, ErrorCodes.BAD_DATA_OPTIONS],
      ['a fractional index', { groupId: 'q0#0', samples: [0.5] }, ErrorCodes.BAD_DATA_OPTIONS],
      ['a repeated index', { groupId: 'q0#0', samples: [1, 2, 1] }, ErrorCodes.BAD_DATA_OPTIONS],
      ['a bad reason', { groupId: 'q0#0', samples: [1], reason: 'Not A Label!' }, ErrorCodes.BAD_DATA_OPTIONS],
      ['an index = n', { groupId: 'q0#0', samples: [0, 4] }, ErrorCodes.GROUP_MISMATCH],
      ['a negative index', { groupId: 'q0#0', samples: [-1] }, ErrorCodes.GROUP_MISMATCH],
      ['an unknown prompt', { groupId: 'nope#0', samples: [0] }, ErrorCodes.UNKNOWN_GROUP],
      ['an epoch not reached yet', { groupId: 'q0#1', samples: [0] }, ErrorCodes.UNKNOWN_GROUP],
      ['no epoch', { groupId: 'q0', samples: [0] }, ErrorCodes.UNKNOWN_GROUP],
      ['a bad epoch', { groupId: 'q0#x', samples: [0] }, ErrorCodes.UNKNOWN_GROUP],
      ['a non-canonical epoch', { groupId: 'q0#00', samples: [0] }, ErrorCodes.UNKNOWN_GROUP],
      ['no prompt id', { groupId: '#0', samples: [0] }, ErrorCodes.UNKNOWN_GROUP],
      ['a non-string group id', { groupId: 7, samples: [0] }, ErrorCodes.UNKNOWN_GROUP],
    ];
    for (const [what, req, code] of cases) {
      const err = await p.returnSamples(req as never).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, what).toBeInstanceOf(DataInputError);
      expect((err as DataInputError).code, what).toBe(code);
    }
    const rejected = (code: string): Promise<number> => metricValue(fx.registry, 'laminar_data_rejections_total', { component: 'prompt-pool', code });
    expect(await rejected(ErrorCodes.BAD_DATA_OPTIONS)).toBe(5);
    expect(await rejected(ErrorCodes.GROUP_MISMATCH)).toBe(2);
    expect(await rejected(ErrorCodes.UNKNOWN_GROUP)).toBe(7);
    expect(await p.progress()).toMatchObject({ returnedPending: 0, returnedEntries: 0, returnedSamples: 0 });
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_samples_total', { reason: 'failover' })).toBe(0);
    // The boundary that is fine: index n-1, and a group id with '#' inside its prompt id part.
    await p.returnSamples({ groupId: 'q0#0', samples: [3] });
    await p.load([{ id: 'a#b', payload: 1, n: 2 }]);
    await p.returnSamples({ groupId: 'a#b#0', samples: [1, 0] });
    expect((await p.claim('r', 2)).map((c) => [c.id, c.groupId, c.samples])).toEqual([
      ['q0', 'q0#0', [3]],
      ['a#b', 'a#b#0', [0, 1]],
    ]);
  });

  it('keeps returned work through a redis-server restart and a SIGKILL with AOF on', async () => {
    const p = await pool({ prompts: 3 });
    await p.returnSamples({ groupId: 'q0#0', samples: [0, 1] });
    await p.returnSamples({ groupId: 'q1#0', samples: [2] });
    await p.returnSamples({ groupId: 'q2#0', samples: [3] });
    const [held] = await p.claim('r', 1);
    const before = await p.progress();
    expect(before).toMatchObject({ returnedPending: 2, returnedLeased: 1, returnedSamples: 4 });
    await fx.server.restart();
    expect(await p.progress()).toEqual(before);
    await fx.server.restart({ kill: true });
    expect(await p.progress()).toEqual(before);
    expect(await p.complete(held!)).toBe('ok');
    const rest = await p.claim('r', 5);
    expect(rest.map((c) => [c.groupId, c.samples, c.returned])).toEqual([
      ['q1#0', [2], true],
      ['q2#0', [3], true],
      ['q0#0', undefined, undefined],
      ['q1#0', undefined, undefined],
      ['q2#0', undefined, undefined],
    ]);
    await fx.server.restart({ kill: true });
    expect(await p.complete(rest[0]!)).toBe('ok');
    expect(await p.complete(held!)).toBe('duplicate');
    expect(await p.progress()).toMatchObject({ returnedCompletions: 2, returnedLeased: 1, leased: 3 });
  });

  it('20 concurrent claimers never get the same returned entry', async () => {
    const p = await pool({ prompts: 30 });
    // 60 entries: two per group, different samples.
    for (let i = 0; i < 30; i++) {
      await p.returnSamples({ groupId: `q${i}#0`, samples: [0, 1] });
      await p.returnSamples({ groupId: `q${i}#0`, samples: [3] });
    }
    const results = await Promise.all(Array.from({ length: 20 }, (_, r) => p.claim(`r${r}`, 4)));
    const all = results.flat();
    const returned = all.filter((c) => c.returned);
    expect(returned).toHaveLength(60);
    expect(all.filter((c) => !c.returned)).toHaveLength(20); // 80 asked: the rest are fresh
    expect(new Set(returned.map((c) => `${c.groupId}/${c.samples!.join(',')}`)).size).toBe(60);
    expect(new Set(all.map((c) => c.token)).size).toBe(80);
    // Within a claim, returned entries come first.
    for (const cs of results) {
      const firstFresh = cs.findIndex((c) => !c.returned);
      if (firstFresh >= 0) expect(cs.slice(firstFresh).every((c) => !c.returned)).toBe(true);
    }
    // Concurrent completions of all of them, twice each: exactly one 'ok' per claim.
    const done = await Promise.all([...returned, ...returned].map((c) => p.complete(c)));
    expect(done.filter((r) => r === 'ok')).toHaveLength(60);
    expect(await p.progress()).toMatchObject({
      returnedCompletions: 60,
      returnedSamplesCompleted: 90,
      returnedDuplicates: 60,
      returnedPending: 0,
      returnedLeased: 0,
    });
  });

  it('a return with a key is queued once: a retry, even after the first was regenerated, reads duplicate', async () => {
    const p = await pool({ prompts: 1 });
    const [c] = await p.claim('r', 1);
    expect(await p.complete(c!)).toBe('ok');
    expect(await p.returnSamples({ groupId: 'q0#0', samples: [2], key: 'q0#0/2@17' })).toBe('ok');
    expect(await p.returnSamples({ groupId: 'q0#0', samples: [2], key: 'q0#0/2@17' })).toBe('duplicate');
    expect(await p.progress()).toMatchObject({ returnedPending: 1, returnedEntries: 1, returnedSamples: 1 });
    const [back] = await p.claim('r2', 2);
    expect(await p.complete(back!)).toBe('ok');
    // Completed meanwhile: the key still says the return happened.
    expect(await p.returnSamples({ groupId: 'q0#0', samples: [2], key: 'q0#0/2@17' })).toBe('duplicate');
    // Another parking of the same sample is another key; no key at all queues every call.
    expect(await p.returnSamples({ groupId: 'q0#0', samples: [2], key: 'q0#0/2@40' })).toBe('ok');
    expect(await p.returnSamples({ groupId: 'q0#0', samples: [1] })).toBe('ok');
    expect(await p.returnSamples({ groupId: 'q0#0', samples: [1] })).toBe('ok');
    expect(await p.progress()).toMatchObject({ returnedPending: 3, returnedEntries: 4, returnedSamples: 4 });
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_returned_samples_total', { reason: 'failover' })).toBe(4);
    // A bad key is refused before anything is queued.
    for (const key of [7, 'k'.repeat(513)]) {
      const err = await p.returnSamples({ groupId: 'q0#0', samples: [0], key } as never).catch((e: unknown) => e);
      expect((err as DataInputError).code).toBe(ErrorCodes.BAD_DATA_OPTIONS);
    }
  });
});
