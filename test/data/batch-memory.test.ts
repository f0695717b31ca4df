/**
 * Batch memory: Batch.release() hands a batch's ArrayBuffer back to the sampler (the trainer's
 * views of it read as empty), later batches are assembled in it with correct bytes, and
 * prefetch 'after-release' assembles the next batch only once the current one is released.
 */
import { describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { ExperienceSampler, type Batch } from '../../src/data/index.js';
import { bufferFixture, metricValue, trajectory } from './helpers.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const fx = bufferFixture('mem');
const { sampler } = fx;

/** Token k of trajectory `seed` (every trajectory's bytes differ from every other's). */
const tokenOf = (seed: number, k: number): number => seed * 1000 + k;
const logprobOf = (seed: number, k: number): number => Math.fround(-(seed + k / 1000));

/** Writes trajectories `from`..`from + count - 1` of `tokens` tokens each (ids `m<seed>`). */
async function write(from: number, count: number, tokens: number): Promise<void> {
  const w = await fx.writer();
  for (let seed = from; seed < from + count; seed++) {
    await w.write(
      trajectory({
        id: `m${seed}`,
        tokens: Int32Array.from({ length: tokens }, (_, k) => tokenOf(seed, k)),
        logprobs: Float32Array.from({ length: tokens }, (_, k) => logprobOf(seed, k)),
        promptLength: 4,
        responseLength: tokens - 4,
      }),
    );
  }
}

/** Every token and logprob of the batch is the one its trajectory was written with. */
function expectWritten(b: Batch, tokens: number): void {
  for (const it of b.items) {
    const seed = Number(it.id.slice(1));
    expect(it.tokens.length).toBe(tokens);
    expect(Array.from(it.tokens)).toEqual(Array.from({ length: tokens }, (_, k) => tokenOf(seed, k)));
    expect(Array.from(it.logprobs)).toEqual(Array.from({ length: tokens }, (_, k) => logprobOf(seed, k)));
  }
}

const ids = (b: Batch): string[] => b.items.map((i) => i.id);
/** Size of the memory behind a batch's payloads (a reused buffer may be larger than the batch). */
const memoryOf = (b: Batch): number => b.items[0]!.tokens.buffer.byteLength;

describe('Batch.release()', () => {
  it('detaches the views of the batch and keeps its memory for the next batch, which reads correct bytes', async () => {
    await write(0, 8, 40);
    const s = await sampler({ prefetch: false });
    const b1 = await s.sample({ timeoutMs: 5000 });
    expectWritten(b1, 40);
    const { tokens, logprobs } = b1.items[2]!;
    b1.release();
    expect(tokens.length).toBe(0);
    expect(logprobs.length).toBe(0);
    expect(tokens[0]).toBeUndefined();
    expect(b1.items.every((i) => i.tokens.length === 0 && i.logprobs.byteLength === 0)).toBe(true);
    expect(b1.items[2]!.id).toBe('m2'); // metadata stays
    expect(s.stats().spareArenaBytes).toBe(b1.bytes);
    expect(await metricValue(fx.registry, 'laminar_buffer_spare_arena_bytes', { buffer: fx.buffer })).toBe(b1.bytes);

    const b2 = await s.sample({ timeoutMs: 5000 });
    expect(ids(b2)).toEqual(['m4', 'm5', 'm6', 'm7']);
    expectWritten(b2, 40);
    expect(s.stats().spareArenaBytes).toBe(0);
    expect(await metricValue(fx.registry, 'laminar_buffer_spare_arena_bytes', { buffer: fx.buffer })).toBe(0);
  });

  it('reuses memory over batches of different sizes, never a spare smaller than the batch', async () => {
    const sizes = [40, 30, 50, 50, 35];
    let from = 0;
    for (const tokens of sizes) {
      await write(from, 4, tokens);
      from += 4;
    }
    const s = await sampler({ prefetch: false });
    const memory: number[] = [];
    for (const tokens of sizes) {
      const b = await s.sample({ timeoutMs: 5000 });
      expect(b.bytes).toBe(4 * tokens * 8);
      expectWritten(b, tokens);
      memory.push(memoryOf(b));
      b.release();
      expect(s.stats().spareArenaBytes).toBe(memory.at(-1));
    }
    // 40: fresh; 30: in the 40's memory; 50: the spare is too small, fresh; 50: reused; 35: in the 50's.
    expect(memory).toEqual([40, 40, 50, 50, 50].map((t) => 4 * t * 8));
  });

  it('is idempotent, and harmless after the sampler is closed', async () => {
    await write(0, 8, 20);
    const s = await sampler({ prefetch: false });
    const b1 = await s.sample({ timeoutMs: 5000 });
    const b2 = await s.sample({ timeoutMs: 5000 });
    b1.release();
    b1.release();
    expect(s.stats().spareArenaBytes).toBe(b1.bytes);
    await s.close();
    expect(s.stats().spareArenaBytes).toBe(0);
    b2.release();
    b2.release();
    expect(b2.items[0]!.tokens.length).toBe(0);
    expect(s.stats().spareArenaBytes).toBe(0);
  });

  it('a batch retried after a record went missing is assembled in the released memory, with correct bytes', async () => {
    await write(0, 4, 40);
    await write(4, 5, 30);
    const s = await sampler({ prefetch: false });
    const b1 = await s.sample({ timeoutMs: 5000 });
    b1.release();
    // Deleted behind the sampler's back: the first try at the next batch finds m5 missing.
    const jsm = await jetstreamManager(fx.nc);
    await jsm.streams.deleteMessage(s.names.stream, s.entries().find((e) => e.id === 'm5')!.seq);
    const b2 = await s.sample({ timeoutMs: 5000 });
    expect(ids(b2)).toEqual(['m4', 'm6', 'm7', 'm8']);
    expectWritten(b2, 30);
    expect(memoryOf(b2)).toBe(b1.bytes);
    expect(s.stats().evicted).toMatchObject({ missing: 1 });
  });
});

describe("prefetch 'after-release'", () => {
  it('assembles the next batch only once the current one is released, in its memory', async () => {
    await write(0, 12, 40);
    const s = await sampler({ prefetch: 'after-release' });
    await expect.poll(() => s.stats().readyBatches).toBe(1); // nothing is held yet
    const b1 = await s.sample({ timeoutMs: 5000 });
    expect(b1.prefetched).toBe(true);
    // An absence (nothing is prefetched while b1 is held): a window, not an event, to wait for.
    await new Promise((r) => setTimeout(r, 300));
    expect(s.stats()).toMatchObject({ readyBatches: 0, reserved: 0 });

    b1.release();
    await expect.poll(() => s.stats().readyBatches).toBe(1);
    expect(s.stats().spareArenaBytes).toBe(0); // the prefetch took the released memory
    const b2 = await s.sample({ timeoutMs: 5000 });
    expect(b2.prefetched).toBe(true);
    expect(ids(b2)).toEqual(['m4', 'm5', 'm6', 'm7']);
    expectWritten(b2, 40);
    expect(memoryOf(b2)).toBe(b1.bytes);

    // A trainer that never releases still gets its next batch, assembled when it asks.
    const b3 = await s.sample({ timeoutMs: 5000 });
    expect(ids(b3)).toEqual(['m8', 'm9', 'm10', 'm11']);
    expectWritten(b3, 40);
    expectWritten(b2, 40); // in other memory
  });

  it('other prefetch values are refused with ERR_BAD_DATA_OPTIONS, as is a bad spareArenas', async () => {
    const bad = (over: Record<string, unknown>): Promise<unknown> =>
      ExperienceSampler.open({ nc: fx.nc, buffer: fx.buffer, registry: fx.registry, batchSize: 1, ...over });
    await expect(bad({ prefetch: 'after-sample' })).rejects.toMatchObject({
      code: ErrorCodes.BAD_DATA_OPTIONS,
      message: expect.stringMatching(/prefetch/) as unknown,
    });
    await expect(bad({ prefetch: 1 })).rejects.toMatchObject({ code: ErrorCodes.BAD_DATA_OPTIONS });
    await expect(bad({ spareArenas: -1 })).rejects.toMatchObject({
      code: ErrorCodes.BAD_DATA_OPTIONS,
      message: expect.stringMatching(/spareArenas/) as unknown,
    });
    await expect(bad({ spareArenas: 1.5 })).rejects.toMatchObject({ code: ErrorCodes.BAD_DATA_OPTIONS });
  });
});

describe('sample() aborted while its batch is assembled', () => {
  it('leaves the records in the buffer and the memory with the sampler', async () => {
    await write(0, 8, 40);
    const s = await sampler({ prefetch: false });
    await expect.poll(() => s.stats().items, { timeout: 5000 }).toBe(8);
    const gone = new AbortController();
    // The batch is picked at once (the records are indexed) and its payloads load from the
    // stream; the caller gives up meanwhile (a sampler-service client that went away).
    const abandoned = s.sample({ signal: gone.signal, timeoutMs: 5000 });
    gone.abort();
    await expect(abandoned).rejects.toMatchObject({ code: ErrorCodes.ABORTED });
    expect(s.stats()).toMatchObject({ items: 8, reserved: 0, samples: 0 });
    expect(s.stats().spareArenaBytes).toBeGreaterThan(0);

    const b = await s.sample({ timeoutMs: 5000 });
    expect(ids(b)).toEqual(['m0', 'm1', 'm2', 'm3']);
    expect(b.items.map((i) => i.timesSampled)).toEqual([1, 1, 1, 1]);
    expectWritten(b, 40);
  });
});
