/**
 * Background deletions wait for a moment when the sampler is not reading the stream (a purge
 * beside a batch's fetch stalls the fetch), but never longer than their bound, and never when
 * someone waits for them (flush, close). Against a real nats-server.
 */
import { describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { silentLogger } from '../../src/common/logger.js';
import { RecordDeleter } from '../../src/data/experience/record-deleter.js';
import { ReadActivity } from '../../src/data/experience/read-activity.js';
import { bufferFixture, metricValue, trajectory } from './helpers.js';

const fx = bufferFixture('del');
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A stream of `count` messages (sequences 1..count) for the test's buffer name. */
async function streamOf(count: number): Promise<{ name: string; messages: () => Promise<number>; has: (seq: number) => Promise<boolean> }> {
  const jsm = await jetstreamManager(fx.nc);
  const name = `DEL_${fx.buffer}`;
  await jsm.streams.add({ name, subjects: [`${name}.>`], allow_direct: true });
  const js = jetstream(fx.nc);
  for (let i = 0; i < count; i++) await js.publish(`${name}.m`, new Uint8Array([i]));
  return {
    name,
    messages: async () => (await jsm.streams.info(name)).state.messages,
    has: async (seq) => (await jsm.streams.getMessage(name, { seq }).catch(() => null)) !== null,
  };
}

/** A stream of `count` messages, and a deleter on it that waits for `reads` to be quiet. */
async function deleterOn(count: number, maxDelayMs = 60_000) {
  const s = await streamOf(count);
  const reads = new ReadActivity();
  let pending = 0;
  const deleter = new RecordDeleter(await jetstreamManager(fx.nc), s.name, silentLogger, { reads, maxDelayMs, onPending: (n) => (pending = n) });
  return { s, reads, deleter, pending: () => pending };
}

/** The stream keeps `held` messages while a read is under way, and `left` once `endRead` ends it. */
async function expectHeldUntil(s: { messages: () => Promise<number> }, endRead: () => void, held: number, left: number): Promise<void> {
  await sleep(300);
  expect(await s.messages()).toBe(held);
  endRead();
  await expect.poll(() => s.messages(), { timeout: 5000 }).toBe(left);
}

describe('record deleter: deletions between reads', () => {
  it('keeps records while a read is under way and deletes them once it ends (purge and single deletes)', async () => {
    const { s, reads, deleter, pending } = await deleterOn(10);
    const endRead = reads.begin();
    // 1..4 lie below the bound (one purge), 7 and 9 above it (deleted one by one).
    deleter.deleteSeqs([1, 2, 3, 4, 7, 9], () => 5);
    await sleep(300);
    expect(await s.messages()).toBe(10);
    expect(pending()).toBe(6);
    endRead();
    await expect.poll(() => s.messages(), { timeout: 5000 }).toBe(4);
    expect(pending()).toBe(0);
    for (const seq of [5, 6, 8, 10]) expect(await s.has(seq)).toBe(true);
    await deleter.idle();
  });

  it('one read taking over from another on the same turn is not a quiet moment', async () => {
    const { s, reads, deleter } = await deleterOn(4);
    const first = reads.begin();
    deleter.deleteSeqs([1, 2], () => 3);
    await sleep(50);
    first();
    await expectHeldUntil(s, reads.begin(), 4, 2);
  });

  it('a deletion queued on the turn a read starts waits for that read', async () => {
    const { s, reads, deleter } = await deleterOn(4);
    // As when a trainer's release queues the last batch's deletion and starts the next assembly.
    deleter.deleteSeqs([1, 2], () => 3);
    await expectHeldUntil(s, reads.begin(), 4, 2);
  });

  it('deletes after maxDelayMs even if reads never stop', async () => {
    const { s, reads, deleter } = await deleterOn(5, 400);
    reads.begin(); // never ends: a trainer sampling back to back
    const t0 = Date.now();
    deleter.deleteSeqs([1, 2, 3], () => 4);
    await sleep(150);
    expect(await s.messages()).toBe(5);
    await expect.poll(() => s.messages(), { timeout: 5000 }).toBe(2);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(380);
  });

  it('idle() deletes at once, reads or not', async () => {
    const { s, reads, deleter } = await deleterOn(3);
    reads.begin();
    deleter.deleteSeqs([2], () => 1);
    const t0 = Date.now();
    await deleter.idle();
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(await s.messages()).toBe(2);
    expect(await s.has(2)).toBe(false);
  });
});

describe("sampler: a batch's records go between assemblies", () => {
  it("prefetch 'after-release': the records of a handed-over batch stay until the next batch is assembled", async () => {
    const w = await fx.writer();
    for (let i = 0; i < 4; i++) await w.write(trajectory({ id: `r${i}` }));
    const s = await fx.sampler({ batchSize: 2, prefetch: 'after-release' });
    const jsm = await jetstreamManager(fx.nc);
    const messages = async (): Promise<number> => (await jsm.streams.info(s.names.stream)).state.messages;
    const b1 = await s.sample({ timeoutMs: 5000 });
    // Handed over and sampled out, but its release is about to start the next assembly.
    await expect.poll(() => s.stats().pendingDeletions).toBe(2);
    expect(await metricValue(fx.registry, 'laminar_buffer_pending_deletions', { buffer: fx.buffer })).toBe(2);
    await sleep(300);
    expect(await messages()).toBe(4);
    b1.release();
    await expect.poll(() => s.stats().readyBatches, { timeout: 5000 }).toBe(1);
    await expect.poll(() => messages(), { timeout: 5000 }).toBe(2);
    const b2 = await s.sample({ timeoutMs: 5000 });
    expect(b2.items.map((i) => i.id)).toEqual(['r2', 'r3']);
    // Nothing left to assemble: the release is a quiet moment.
    b2.release();
    await expect.poll(() => messages(), { timeout: 5000 }).toBe(0);
    expect(s.stats().pendingDeletions).toBe(0);
  });

  it('rejects a bad maxDeletionDelayMs', async () => {
    await expect(fx.sampler({ maxDeletionDelayMs: -1 })).rejects.toMatchObject({ code: 'ERR_BAD_DATA_OPTIONS' });
  });
});
