import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { metricValue, promptPoolFixture } from './helpers.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const fx = promptPoolFixture('p');
const pool = fx.open;

const prompts = (k: number): Array<{ id: string; payload: unknown; n?: number }> =>
  Array.from({ length: k }, (_, i) => ({ id: `q${i}`, payload: { text: `question ${i}` } }));

describe('PromptPool', () => {
  it('loads from an iterable and hands each prompt to exactly one claimer', async () => {
    const p = await pool();
    expect(await p.load(prompts(50))).toEqual({ loaded: 50, duplicates: 0, rejected: [] });
    // 5 rollouts claim concurrently: every prompt goes to exactly one of them.
    const claims = (await Promise.all(Array.from({ length: 5 }, (_, r) => p.claim(`r${r}`, 20)))).flat();
    expect(claims).toHaveLength(50);
    expect(new Set(claims.map((c) => c.id)).size).toBe(50);
    const c = claims.find((x) => x.id === 'q7')!;
    expect(c).toMatchObject({ payload: { text: 'question 7' }, n: 4, epoch: 0, groupId: 'q7#0' });
    expect(await p.claim('r9', 1)).toEqual([]);
    expect(await p.groupSize('q7#0')).toBe(4);
    expect(await p.groupSize('q7#5')).toBeUndefined();
    expect(await p.groupSize('nope#0')).toBeUndefined();
  });

  it('completes exactly once; a retried completion is a duplicate', async () => {
    const p = await pool();
    await p.load(prompts(2));
    const [c] = await p.claim('r1', 1);
    expect(await p.complete(c!)).toBe('ok');
    expect(await p.complete(c!)).toBe('duplicate');
    const prog = await p.progress();
    expect(prog).toMatchObject({ completions: 1, duplicates: 1, doneThisEpoch: 1, pending: 1, leased: 0 });
    expect(await metricValue(fx.registry, 'laminar_prompt_pool_completions_total')).toBe(1);
  });

  it('an expired lease returns the prompt; the old holder then loses it to the new one', async () => {
    const p = await pool({ leaseMs: 100 });
    await p.load(prompts(1));
    const [first] = await p.claim('slow', 1, 100);
    await new Promise((r) => setTimeout(r, 250));
    const [second] = await p.claim('fast', 1);
    expect(second!.id).toBe(first!.id);
    await expect(p.complete(first!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    expect(await p.complete(second!)).toBe('ok');
    expect((await p.progress()).expired).toBe(1);
  });

  it('an expired lease not yet re-claimed still completes, once', async () => {
    const p = await pool();
    await p.load(prompts(1));
    const [c] = await p.claim('slow', 1, 50);
    await new Promise((r) => setTimeout(r, 150));
    expect(await p.complete(c!)).toBe('ok');
    // Completed: nobody gets it again, even though its lease had run out.
    expect(await p.claim('other', 1)).toEqual([]);
    expect(await p.progress()).toMatchObject({ completions: 1, leased: 0, pending: 0, doneThisEpoch: 1, finished: true });
  });

  it('give-back (one claim, or all of a failed rollout) returns work and fences the old claim', async () => {
    const p = await pool();
    await p.load(prompts(4));
    const mine = await p.claim('dead', 3);
    const [a] = mine;
    await p.giveBack(a!);
    await expect(p.complete(a!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    await expect(p.giveBack(a!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    expect(await p.giveBackRollout('dead')).toBe(2);
    const again = await p.claim('alive', 10);
    expect(again.map((c) => c.id).sort()).toEqual(['q0', 'q1', 'q2', 'q3']);
    expect((await p.progress()).returned).toBe(3);
    await expect(p.extend(mine[1]!)).rejects.toMatchObject({ code: ErrorCodes.LEASE_LOST });
    expect(await p.extend(again[0]!, 5000)).toBeGreaterThan(Date.now() - 60_000);
  });

  it('runs epochs: the next pass starts only when every prompt of this one is complete', async () => {
    const p = await pool({ epochs: 2 });
    await p.load(prompts(3));
    const e0 = await p.claim('r', 3);
    expect(await p.claim('r', 1)).toEqual([]);
    for (const c of e0.slice(0, 2)) await p.complete(c);
    expect(await p.claim('r', 1)).toEqual([]); // one still leased
    await p.complete(e0[2]!);
    const e1 = await p.claim('r', 10);
    expect(e1.map((c) => [c.id, c.epoch, c.groupId])).toEqual([
      ['q0', 1, 'q0#1'],
      ['q1', 1, 'q1#1'],
      ['q2', 1, 'q2#1'],
    ]);
    // A late retry of an epoch-0 completion is a duplicate, not an epoch-1 completion.
    expect(await p.complete(e0[0]!)).toBe('duplicate');
    for (const c of e1) await p.complete(c);
    expect(await p.claim('r', 1)).toEqual([]);
    expect(await p.progress()).toMatchObject({ epoch: 1, finished: true, completions: 6, claims: 6 });
  });

  it('reports broken JSONL lines with their numbers and loads the good ones', async () => {
    const file = join(tmpdir(), `laminar-prompts-${process.pid}.jsonl`);
    writeFileSync(
      file,
      [
        '{"id":"a","payload":"x","n":2}',
        '{"id":"b","payload":',
        '',
        '{"id":"c","payload":{"q":1}}',
        '{"payload":"no id"}',
        '{"id":"d","payload":"x","n":0}',
        '{"id":"a","payload":"dup"}',
        '{"id":7,"payload":[1,2]}',
        // Trajectory ids begin with the prompt id and are message ids: refused here, not at write.
        '{"id":" lead","payload":"x"}',
        '{"id":"tab\\there","payload":"x"}',
        '{"id":"trail ","payload":"x"}',
      ].join('\n'),
    );
    const p = await pool();
    const report = await p.loadJsonl(file).finally(() => rmSync(file, { force: true }));
    expect(report.loaded).toBe(4);
    expect(report.rejected.map((r) => [r.line, r.code])).toEqual([
      [2, ErrorCodes.BAD_PROMPT],
      [5, ErrorCodes.BAD_PROMPT],
      [6, ErrorCodes.BAD_PROMPT],
      [9, ErrorCodes.BAD_PROMPT],
      [10, ErrorCodes.BAD_PROMPT],
      [7, ErrorCodes.DUPLICATE_PROMPT],
    ]);
    expect(report.rejected[0]!.message).toMatch(/^line 2: not JSON/);
    expect(report.rejected[3]!.message).toMatch(/begins with whitespace or holds control characters/);
    expect(await metricValue(fx.registry, 'laminar_data_rejections_total', { code: ErrorCodes.BAD_PROMPT })).toBe(5);
    const claims = await p.claim('r', 10);
    expect(claims.map((c) => [c.id, c.n])).toEqual([
      ['a', 2],
      ['c', 4],
      ['7', 4],
      ['trail ', 4],
    ]);
  });

  it('survives a redis-server restart and a SIGKILL with AOF on', async () => {
    const p = await pool({ epochs: 3 });
    await p.load(prompts(10));
    const claims = await p.claim('r', 4);
    await p.complete(claims[0]!);
    const before = await p.progress();
    await fx.server.restart();
    expect(await p.progress()).toEqual(before);
    await p.complete(claims[1]!);
    await fx.server.restart({ kill: true });
    const after = await p.progress();
    expect(after).toMatchObject({ completions: 2, leased: 2, pending: 6, epochs: 3 });
    expect(await p.complete(claims[1]!)).toBe('duplicate');
    expect(await p.complete(claims[2]!)).toBe('ok');
  });
});
