/** Pure parts of the broadcast: the appendix-C model, chain plans, peer message codec, auth. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkProof, loadSecret, newNonce, proof } from '../../src/relay/broadcast/auth.js';
import { broadcastTime, optimalChunkCount, optimalChunkSize, perChunkCost } from '../../src/relay/broadcast/chunk-model.js';
import { decodePeerMessage, encodePeerMessage, type PeerMessage } from '../../src/relay/broadcast/messages.js';
import { downstreamOf, parsePeerList, validatePlan } from '../../src/relay/broadcast/plan.js';
import { parseBandwidth, parseLatency } from '../../src/common/units.js';

describe('appendix C model', () => {
  const link = { bandwidth: 250e6, startup: 300e-6 };

  it('matches the closed form T(p,k) = (p+k-2)(M/k T_byte + T_start)', () => {
    expect(broadcastTime(2, 1, 1e9, link)).toBeCloseTo(1e9 / 250e6 + 300e-6, 9);
    expect(broadcastTime(8, 32, 2 ** 30, link)).toBeCloseTo(38 * (2 ** 30 / 32 / 250e6 + 300e-6), 9);
  });

  it('picks the chunk count no neighbour beats', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 3, max: 2048 }),
        fc.integer({ min: 1 << 20, max: 2 ** 36 }),
        fc.double({ min: 1e-7, max: 1e-2, noNaN: true }),
        (p, bytes, startup) => {
          const l = { bandwidth: 12.5e9, startup };
          const k = optimalChunkCount(p, bytes, l);
          const t = broadcastTime(p, k, bytes, l);
          if (k > 1) expect(t).toBeLessThanOrEqual(broadcastTime(p, k - 1, bytes, l) * (1 + 1e-12));
          if (k < Math.floor(bytes / 4096)) expect(t).toBeLessThanOrEqual(broadcastTime(p, k + 1, bytes, l) * (1 + 1e-12));
        },
      ),
    );
  });

  it('gives page-multiple chunk sizes, and the largest chunk for a single hop', () => {
    const size = optimalChunkSize(8, 2 ** 30, link);
    expect(size % 4096).toBe(0);
    expect(size).toBeGreaterThan(1 << 20);
    expect(optimalChunkSize(2, 2 ** 30, link, 1 << 30)).toBe(2 ** 30);
  });

  it("recovers a relay's per-chunk cost from one hop in two chunk sizes, and never a negative one", () => {
    // 256 MiB at 4 GB/s plus 200 us per chunk, in 256 and in 16 chunks.
    const bytesTime = 2 ** 28 / 4e9;
    const cost = perChunkCost({ chunks: 256, seconds: bytesTime + 256 * 200e-6 }, { chunks: 16, seconds: bytesTime + 16 * 200e-6 });
    expect(cost).toBeCloseTo(200e-6, 12);
    // Noise that makes the smaller chunks look faster gives 0, not a negative start-up.
    expect(perChunkCost({ chunks: 256, seconds: 0.1 }, { chunks: 16, seconds: 0.11 })).toBe(0);
    expect(() => perChunkCost({ chunks: 16, seconds: 1 }, { chunks: 16, seconds: 2 })).toThrow(RangeError);
    // With that cost in T_start, 1 GiB on 8 relays over 2 Gbit/s wants chunks of a few MiB, not
    // the sub-MiB ones that a perftest latency alone gives.
    const withCost = optimalChunkSize(8, 2 ** 30, { bandwidth: 250e6, startup: 10e-6 + cost });
    const latencyOnly = optimalChunkSize(8, 2 ** 30, { bandwidth: 250e6, startup: 10e-6 });
    expect(latencyOnly).toBeLessThan(1 << 20);
    expect(withCost).toBeGreaterThanOrEqual(2 << 20);
    expect(withCost).toBeLessThanOrEqual(4 << 20);
  });

  it('parses bandwidths and latencies', () => {
    expect(parseBandwidth('2gbit')).toBe(250e6);
    expect(parseBandwidth('250MB/s')).toBe(250e6);
    expect(parseBandwidth('1GiB/s')).toBe(2 ** 30);
    expect(parseLatency('5us')).toBeCloseTo(5e-6);
    expect(() => parseBandwidth('fast')).toThrow(/bandwidth/);
  });
});

describe('chain plans', () => {
  it('parses the static --peers form, master first', () => {
    const plan = parsePeerList('a@10.0.0.1:1,b@10.0.0.2:1,c@10.0.0.3:1');
    expect(plan.epoch).toBe(1);
    expect(downstreamOf(plan, 'a').map((m) => m.id)).toEqual(['b', 'c']);
    expect(downstreamOf(plan, 'c')).toEqual([]);
    expect(downstreamOf(plan, 'zz')).toEqual([]);
  });

  it('refuses duplicates, bad addresses and bad ids with stable codes', () => {
    expect(() => parsePeerList('a@10.0.0.1:1,a@10.0.0.2:1')).toThrow(expect.objectContaining({ code: 'ERR_BAD_PLAN' }));
    expect(() => parsePeerList('a@host:1')).toThrow(expect.objectContaining({ code: 'ERR_BAD_ADDRESS' }));
    expect(() => validatePlan({ epoch: -1, relays: [] })).toThrow(expect.objectContaining({ code: 'ERR_BAD_PLAN' }));
    expect(() => validatePlan({ epoch: 1, relays: [{ id: 'bad id', address: '1.2.3.4:5' }] })).toThrow(expect.objectContaining({ code: 'ERR_BAD_PLAN' }));
  });
});

describe('peer messages', () => {
  it('round-trips every message kind', () => {
    const nonce = newNonce();
    for (const m of [
      { t: 'hello', p: 1, from: 'r1', role: 'relay', nonce, epoch: 3 },
      { t: 'offer', model: 'm', version: 2, size: 10_000, headerBytes: 4096 },
      { t: 'accept', model: 'm', version: 2, from: 5, have: [7, 9] },
      { t: 'chunk', model: 'm', version: 2, index: 4 },
      { t: 'progress', model: 'm', version: 2, hwm: 10, complete: true },
      { t: 'welcome', epoch: 3, chunkAdvice: true },
      { t: 'welcome', epoch: 3 },
      { t: 'chunk-query', size: 2 ** 40 },
      { t: 'chunk-advice', size: 2 ** 40, chunkSize: 4 * 2 ** 20 },
    ] satisfies PeerMessage[]) {
      expect(decodePeerMessage(encodePeerMessage(m))).toEqual(m);
    }
    // Advice outside what a version's header accepts is refused like any bad message.
    for (const chunkSize of [0, 4095, 2 ** 31 + 1, 1.5]) {
      expect(() => decodePeerMessage(encodePeerMessage({ t: 'chunk-advice', size: 1, chunkSize }))).toThrow(
        expect.objectContaining({ code: 'ERR_PEER_BAD_MESSAGE' }),
      );
    }
  });

  it('turns any byte string into a message or a ProtocolError with a stable code, never anything else', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), (bytes) => {
        try {
          decodePeerMessage(bytes);
        } catch (err) {
          expect((err as { code?: string }).code).toBe('ERR_PEER_BAD_MESSAGE');
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('peer authentication', () => {
  const secret = loadSecret({ value: 'a-job-secret-of-sufficient-length' });

  it('accepts only the proof made with the same secret, role, nonce and id', () => {
    const nonce = newNonce();
    const p = proof(secret, 'connector', nonce, 'r1');
    expect(checkProof(secret, 'connector', nonce, 'r1', p)).toBe(true);
    expect(checkProof(secret, 'acceptor', nonce, 'r1', p)).toBe(false);
    expect(checkProof(secret, 'connector', newNonce(), 'r1', p)).toBe(false);
    expect(checkProof(secret, 'connector', nonce, 'r2', p)).toBe(false);
    expect(checkProof(loadSecret({ value: 'another-secret-of-enough-length' }), 'connector', nonce, 'r1', p)).toBe(false);
  });

  it('refuses short or missing secrets', () => {
    expect(() => loadSecret({ value: 'short' })).toThrow(expect.objectContaining({ code: 'ERR_SECRET_TOO_SHORT' }));
    expect(() => loadSecret({})).toThrow(expect.objectContaining({ code: 'ERR_SECRET_REQUIRED' }));
    expect(() => loadSecret({ file: '/nonexistent/secret' })).toThrow(expect.objectContaining({ code: 'ERR_SECRET_UNREADABLE' }));
  });
});
