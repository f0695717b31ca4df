/**
 * The rollout agent's cache of tool messages' token ids (src/rollout-agent/token-ids-cache.ts):
 * the same content is tokenized once (also when asked again while on its way), a failed
 * tokenization is asked again, the ids held stay within the bound (least recently used out), and
 * every caller gets its own copy.
 */
import { describe, expect, it } from 'vitest';
import { TokenIdsCache } from '../../src/rollout-agent/token-ids-cache.js';

/** A tokenizer that counts its calls: one id per character. */
function counting(): { calls: string[]; tokenize: (c: string) => Promise<number[]> } {
  const calls: string[] = [];
  return {
    calls,
    tokenize: (c) => {
      calls.push(c);
      return Promise.resolve(Array.from(c, (ch) => ch.charCodeAt(0)));
    },
  };
}

describe('the token ids cache', () => {
  it('tokenizes a content once, also when asked again while on its way', async () => {
    const t = counting();
    const cache = new TokenIdsCache();
    const [a, b] = await Promise.all([cache.of('abc', t.tokenize), cache.of('abc', t.tokenize)]);
    expect(await cache.of('abc', t.tokenize)).toEqual([97, 98, 99]);
    expect(a).toEqual(b);
    expect(t.calls).toEqual(['abc']);
    expect({ hits: cache.hits, misses: cache.misses }).toEqual({ hits: 2, misses: 1 });
  });

  it('gives each caller its own copy', async () => {
    const t = counting();
    const cache = new TokenIdsCache();
    const first = await cache.of('xy', t.tokenize);
    first.push(0);
    expect(await cache.of('xy', t.tokenize)).toEqual([120, 121]);
  });

  it('asks again after a failure', async () => {
    const cache = new TokenIdsCache();
    let calls = 0;
    const flaky = (): Promise<number[]> => (++calls === 1 ? Promise.reject(new Error('engine away')) : Promise.resolve([1]));
    await expect(cache.of('q', flaky)).rejects.toThrow('engine away');
    expect(await cache.of('q', flaky)).toEqual([1]);
    expect(calls).toBe(2);
  });

  it('holds at most its bound of ids, the least recently used going first', async () => {
    const t = counting();
    const cache = new TokenIdsCache(6);
    await cache.of('aaa', t.tokenize);
    await cache.of('bbb', t.tokenize);
    await cache.of('aaa', t.tokenize); // used again: bbb is now the oldest
    await cache.of('cc', t.tokenize); // 8 ids: bbb goes
    expect(cache.size).toBe(2);
    await cache.of('aaa', t.tokenize);
    await cache.of('cc', t.tokenize);
    await cache.of('bbb', t.tokenize);
    expect(t.calls).toEqual(['aaa', 'bbb', 'cc', 'bbb']);
    // A content longer than the bound is never kept.
    await cache.of('0123456789', t.tokenize);
    await cache.of('0123456789', t.tokenize);
    expect(t.calls.filter((c) => c === '0123456789')).toHaveLength(2);
  });
});
