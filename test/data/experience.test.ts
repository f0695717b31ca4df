import { describe, expect, it } from 'vitest';
import { jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import { ExperienceWriter, prioritized, stalenessBounded, uniform, wholeGroups, type SamplingStrategy, type TrajectoryInput } from '../../src/data/index.js';
import { bufferFixture, metricValue, trajectory } from './helpers.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const fx = bufferFixture('b');
const { writer, sampler } = fx;

async function writeAll(w: ExperienceWriter, ts: TrajectoryInput[]): Promise<void> {
  for (const t of ts) await w.write(t);
}
const ids = (b: { items: Array<{ id: string }> }): string[] => b.items.map((i) => i.id);
async function streamMessages(): Promise<number> {
  const jsm = await jetstreamManager(fx.nc);
  return (await jsm.streams.info(`LAMINAR_EXP_${fx.buffer}`)).state.messages;
}

describe('experience buffer: writer + FIFO sampler', () => {
  it('round-trips trajectories in FIFO order and removes them once sampled', async () => {
    const w = await writer();
    await writeAll(
      w,
      Array.from({ length: 10 }, (_, i) => trajectory({ id: `a${i}`, reward: i, weightVersion: 0, info: { adv: i / 2 } }, 16 + i)),
    );
    const s = await sampler({ batchSize: 4, trainerVersion: 2 });
    const b1 = await s.sample({ timeoutMs: 5000 });
    expect(ids(b1)).toEqual(['a0', 'a1', 'a2', 'a3']);
    const it3 = b1.items[3]!;
    expect(Array.from(it3.tokens)).toEqual(Array.from({ length: 19 }, (_, i) => i + 100));
    expect(it3.logprobs[5]).toBeCloseTo(-0.5);
    expect(it3).toMatchObject({ reward: 3, promptLength: 4, responseLength: 15, staleness: 2, timesSampled: 1, info: { adv: 1.5 } });
    expect(b1.staleness).toEqual({ min: 2, max: 2, mean: 2, histogram: { 2: 4 } });
    expect(ids(await s.sample({ timeoutMs: 5000 }))).toEqual(['a4', 'a5', 'a6', 'a7']);
    expect(s.stats()).toMatchObject({ items: 2, samples: 8, inserts: 10, evicted: { sampled: 8 } });
    await s.flush();
    expect(await streamMessages()).toBe(2);
    // Two left: a batch of 4 is not there yet.
    await expect(s.sample({ timeoutMs: 100 })).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    await writeAll(w, [trajectory({ id: 'a10' }), trajectory({ id: 'a11' })]);
    expect(ids(await s.sample({ timeoutMs: 5000 }))).toEqual(['a8', 'a9', 'a10', 'a11']);
  });

  it('prefetches the next batch while the current one trains', async () => {
    const w = await writer();
    await writeAll(
      w,
      Array.from({ length: 12 }, (_, i) => trajectory({ id: `p${i}` })),
    );
    const s = await sampler({ batchSize: 4 });
    const b1 = await s.sample({ timeoutMs: 5000 });
    await expect.poll(() => s.stats().readyBatches).toBe(1);
    const b2 = await s.sample({ timeoutMs: 5000 });
    expect(b2.prefetched).toBe(true);
    expect([...ids(b1), ...ids(b2)]).toEqual(Array.from({ length: 8 }, (_, i) => `p${i}`));
    const cold = await sampler({ batchSize: 4, prefetch: false, buffer: `${fx.buffer}x` });
    await writeAll(
      await writer({ buffer: `${fx.buffer}x` }),
      Array.from({ length: 4 }, (_, i) => trajectory({ id: `c${i}` })),
    );
    expect((await cold.sample({ timeoutMs: 5000 })).prefetched).toBe(false);
  });

  it('deduplicates a trajectory id, within the duplicate window and after it', async () => {
    const w = await writer({ duplicateWindowMs: 200 });
    const t = trajectory({ id: 'dup' });
    expect((await w.write(t)).duplicate).toBe(false);
    expect((await w.write(t)).duplicate).toBe(true);
    await new Promise((r) => setTimeout(r, 400));
    const again = await w.write(t);
    expect(again.duplicate).toBe(true);
    expect(await streamMessages()).toBe(1);
    expect(await metricValue(fx.registry, 'laminar_buffer_writes_total', { result: 'duplicate' })).toBe(2);
  });

  it('a retried write whose earlier attempt was stored but never acknowledged is ok, not a duplicate', async () => {
    const w = await writer();
    // The fault a server killed between storing and answering leaves: the record is stored and
    // the answer never comes (a transport timeout, which the writer retries).
    const inner = w as unknown as { js: JetStreamClient };
    const real = inner.js;
    let attempts = 0;
    inner.js = new Proxy(real, {
      get: (target, key): unknown =>
        key === 'publish'
          ? async (...args: Parameters<JetStreamClient['publish']>) => {
              const first = attempts++ === 0;
              const ack = await target.publish(...args);
              if (!first) return ack;
              throw Object.assign(new Error('timeout'), { name: 'TimeoutError' });
            }
          : (Reflect.get(target, key) as unknown),
    });
    const t = trajectory({ id: 'lost-ack' });
    expect(await w.write(t)).toMatchObject({ duplicate: false });
    expect(attempts).toBe(2);
    expect(await streamMessages()).toBe(1);
    expect(await metricValue(fx.registry, 'laminar_buffer_write_lost_acks_total')).toBe(1);
    expect(await metricValue(fx.registry, 'laminar_buffer_writes_total', { result: 'duplicate' })).toBe(0);
    // A second write of the id is still a duplicate.
    inner.js = real;
    expect(await w.write(t)).toMatchObject({ duplicate: true });
  });

  it('stores payloads larger than the max payload as chunks behind a record (claim check)', async () => {
    const w = await writer();
    const big = 300_000; // 2.4 MB of payload, the server takes 1 MiB per message
    const t = trajectory({ id: 'big' }, big);
    const r = await w.write(t);
    expect(r.chunks).toBe(3);
    expect((await w.write(t)).duplicate).toBe(true);
    expect(await streamMessages()).toBe(4);
    const s = await sampler({ batchSize: 1 });
    const [item] = (await s.sample({ timeoutMs: 5000 })).items;
    expect(item!.tokens.length).toBe(big);
    expect(item!.tokens[big - 1]).toBe(big - 1 + 100);
    expect(item!.logprobs[big - 1]).toBeCloseTo(-(big - 1) / 10, 0);
    await s.flush();
    expect(await streamMessages()).toBe(0);
  });
});

describe('sampling strategies', () => {
  it('uniform picks distinct items at random (seeded)', async () => {
    const w = await writer();
    await writeAll(
      w,
      Array.from({ length: 20 }, (_, i) => trajectory({ id: `u${i}` })),
    );
    const s = await sampler({ batchSize: 8, strategy: uniform(), seed: 7 });
    const b = ids(await s.sample({ timeoutMs: 5000 }));
    expect(new Set(b).size).toBe(8);
    expect(b).not.toEqual(Array.from({ length: 8 }, (_, i) => `u${i}`));
  });

  it('prioritized follows priority^exponent and never picks priority 0', async () => {
    const w = await writer();
    await writeAll(
      w,
      Array.from({ length: 20 }, (_, i) => trajectory({ id: `q${i}`, priority: i < 10 ? 0 : i === 19 ? 1000 : 1 })),
    );
    const s = await sampler({ batchSize: 5, strategy: prioritized({ exponent: 1 }), eviction: { maxTimesSampled: Infinity }, prefetch: false });
    for (let k = 0; k < 5; k++) {
      const b = ids(await s.sample({ timeoutMs: 5000 }));
      expect(b.every((id) => Number(id.slice(1)) >= 10)).toBe(true);
      expect(b).toContain('q19');
    }
    // Users update priorities (e.g. from TD errors) and the next batch follows them.
    for (let i = 0; i < 20; i++) s.updatePriority(`q${i}`, i < 5 ? 1 : 0);
    expect(ids(await s.sample({ timeoutMs: 5000 })).sort()).toEqual(['q0', 'q1', 'q2', 'q3', 'q4']);
  });

  it('staleness-bounded drops (and counts) trajectories beyond max_staleness', async () => {
    const w = await writer();
    await writeAll(
      w,
      [0, 1, 2, 3, 4, 5].map((v) => trajectory({ id: `s${v}`, weightVersion: v })),
    );
    const evicted: string[] = [];
    const s = await sampler({
      batchSize: 2,
      trainerVersion: 5,
      strategy: stalenessBounded({ maxStaleness: 2 }),
      onEvict: (es, why) => evicted.push(...es.map((e) => `${e.id}:${why}`)),
    });
    const b = await s.sample({ timeoutMs: 5000 });
    expect(ids(b)).toEqual(['s3', 's4']);
    expect(b.staleness.max).toBeLessThanOrEqual(2);
    await expect.poll(() => s.stats().evicted.stale).toBe(3);
    expect(evicted).toEqual(expect.arrayContaining(['s0:stale', 's1:stale', 's2:stale']));
    expect(await metricValue(fx.registry, 'laminar_buffer_evicted_total', { reason: 'stale' })).toBe(3);
  });

  it('staleness-bounded re-checks a prefetched batch when the trainer version moves', async () => {
    const w = await writer();
    await writeAll(
      w,
      [0, 0, 3, 3].map((v, i) => trajectory({ id: `r${i}`, weightVersion: v })),
    );
    const s = await sampler({ batchSize: 2, trainerVersion: 0, strategy: stalenessBounded({ maxStaleness: 1 }) });
    await expect.poll(() => s.stats().readyBatches).toBe(1); // r0, r1 prefetched at version 0
    s.setTrainerVersion(3);
    const b = await s.sample({ timeoutMs: 5000 });
    expect(ids(b)).toEqual(['r2', 'r3']);
    expect(b.staleness.histogram).toEqual({ 0: 2 });
  });

  it('staleness down-weighting prefers fresh trajectories but keeps stale ones', async () => {
    const w = await writer();
    await writeAll(
      w,
      Array.from({ length: 10 }, (_, i) => trajectory({ id: `d${i}`, weightVersion: i < 5 ? 0 : 10 })),
    );
    const s = await sampler({
      batchSize: 5,
      trainerVersion: 10,
      strategy: stalenessBounded({ maxStaleness: 1, mode: 'downweight', decay: 0.01 }),
      prefetch: false,
    });
    const b = await s.sample({ timeoutMs: 5000 });
    expect(ids(b).sort()).toEqual(['d5', 'd6', 'd7', 'd8', 'd9']);
    expect(s.stats().items).toBe(5);
  });

  it('whole GRPO groups: sampleable once complete, batches of whole groups', async () => {
    const w = await writer();
    const member = (g: string, i: number, size = 3): TrajectoryInput => trajectory({ id: `${g}-${i}`, groupId: g, sampleIndex: i, groupSize: size });
    await writeAll(w, [member('A', 0), member('B', 0), member('B', 1), member('A', 1), member('B', 2)]);
    const s = await sampler({ batchSize: 3, strategy: wholeGroups() });
    expect(ids(await s.sample({ timeoutMs: 5000 }))).toEqual(['B-0', 'B-1', 'B-2']);
    await expect(s.sample({ timeoutMs: 150 })).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    await w.write(member('A', 2));
    const b = await s.sample({ timeoutMs: 5000 });
    expect(ids(b)).toEqual(['A-0', 'A-1', 'A-2']);
    expect(b.groups).toEqual(['A']);
  });

  it('a custom strategy is a few lines', async () => {
    const w = await writer();
    await writeAll(
      w,
      [3, 9, 1, 7].map((r, i) => trajectory({ id: `c${i}`, reward: r })),
    );
    const bestReward: SamplingStrategy = {
      name: 'best-reward',
      select: (candidates, count) => [...candidates].sort((a, b) => b.reward - a.reward).slice(0, count),
    };
    const s = await sampler({ batchSize: 2, strategy: bestReward, rateLimit: { minSizeToSample: 4 } });
    expect(ids(await s.sample({ timeoutMs: 5000 }))).toEqual(['c1', 'c3']);
  });
});

describe('eviction', () => {
  it('evicts oldest first beyond the item capacity, visibly', async () => {
    const w = await writer();
    const gone: string[] = [];
    const s = await sampler({ batchSize: 2, eviction: { maxItems: 3 }, onEvict: (es, why) => gone.push(...es.map((e) => `${e.id}:${why}`)), prefetch: false });
    await writeAll(
      w,
      Array.from({ length: 5 }, (_, i) => trajectory({ id: `e${i}` })),
    );
    await expect.poll(() => s.stats().inserts).toBe(5);
    expect(gone).toEqual(['e0:capacity', 'e1:capacity']);
    expect(s.entries().map((e) => e.id)).toEqual(['e2', 'e3', 'e4']);
    expect(await metricValue(fx.registry, 'laminar_buffer_evicted_total', { reason: 'capacity' })).toBe(2);
    await s.flush();
    expect(await streamMessages()).toBe(3);
  });

  it('evicts the most stale first, and by bytes', async () => {
    const w = await writer();
    const s = await sampler({ batchSize: 1, eviction: { maxBytes: 3 * 16 * 8, policy: 'most-stale' }, prefetch: false });
    await writeAll(
      w,
      [5, 1, 7, 2].map((v, i) => trajectory({ id: `m${i}`, weightVersion: v }, 16)),
    );
    await expect.poll(() => s.stats().inserts).toBe(4);
    expect(s.entries().map((e) => e.id)).toEqual(['m0', 'm2', 'm3']);
    expect(s.stats().bytes).toBe(3 * 16 * 8);
  });

  it('removes a trajectory after max_times_sampled', async () => {
    const w = await writer();
    await writeAll(w, [trajectory({ id: 'x0' }), trajectory({ id: 'x1' })]);
    const s = await sampler({ batchSize: 2, eviction: { maxTimesSampled: 2 }, prefetch: false });
    expect((await s.sample()).items.map((i) => i.timesSampled)).toEqual([1, 1]);
    expect((await s.sample()).items.map((i) => i.timesSampled)).toEqual([2, 2]);
    expect(s.stats()).toMatchObject({ items: 0, evicted: { sampled: 2 } });
  });
});

describe('rate limiting', () => {
  it('waits for min size, honours samples-per-insert, timeouts and abort', async () => {
    const w = await writer();
    const s = await sampler({
      batchSize: 2,
      rateLimit: { minSizeToSample: 3, samplesPerInsert: 1, errorBuffer: 0 },
      eviction: { maxTimesSampled: Infinity },
      prefetch: false,
    });
    await writeAll(w, [trajectory({ id: 'l0' }), trajectory({ id: 'l1' })]);
    await expect(s.sample({ timeoutMs: 150 })).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    await w.write(trajectory({ id: 'l2' }));
    await s.sample({ timeoutMs: 5000 }); // 2 samples for 3 inserts
    // A third sample of 2 would exceed 3 inserts x 1 sample per insert: blocked until inserts.
    const ac = new AbortController();
    const blocked = s.sample({ signal: ac.signal });
    setTimeout(() => ac.abort(), 100);
    await expect(blocked).rejects.toMatchObject({ code: ErrorCodes.ABORTED });
    await w.write(trajectory({ id: 'l3' }));
    await expect(s.sample({ timeoutMs: 5000 })).resolves.toBeDefined();
    expect(await metricValue(fx.registry, 'laminar_data_rejections_total', { code: 'ERR_TIMEOUT' })).toBe(1);
  });
});

describe('metrics', () => {
  it('exposes a staleness histogram and buffer gauges', async () => {
    const w = await writer();
    await writeAll(
      w,
      [0, 1, 1, 3].map((v, i) => trajectory({ id: `h${i}`, weightVersion: v })),
    );
    const s = await sampler({ batchSize: 4, trainerVersion: 3 });
    const b = await s.sample({ timeoutMs: 5000 });
    expect(b.staleness.histogram).toEqual({ 3: 1, 2: 2, 0: 1 });
    const text = await fx.registry.metrics();
    expect(text).toMatch(new RegExp(`laminar_buffer_staleness_bucket\\{le="0",buffer="${fx.buffer}"\\} 1`));
    expect(text).toMatch(new RegExp(`laminar_buffer_staleness_bucket\\{le="2",buffer="${fx.buffer}"\\} 3`));
    expect(text).toMatch(new RegExp(`laminar_buffer_staleness_count\\{buffer="${fx.buffer}"\\} 4`));
    expect(text).toContain('laminar_buffer_sample_seconds_bucket');
    expect(text).toMatch(new RegExp(`laminar_buffer_items\\{buffer="${fx.buffer}"\\} 0`));
  });
});
