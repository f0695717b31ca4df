/**
 * A trajectory stays known as written after its record leaves the buffer (trained on or
 * evicted), for the completion horizon: the sampler marks it completed before the record goes,
 * and never deletes a record whose mark it could not store. Against a real nats-server.
 */
import { describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { silentLogger } from '../../src/common/logger.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { DEFAULT_COMPLETION_HORIZON_MS, ensureBufferStream } from '../../src/data/experience/stream.js';
import { RecordDeleter } from '../../src/data/experience/record-deleter.js';
import type { BufferEntry } from '../../src/data/experience/entry.js';
import { bufferFixture, metricValue, trajectory } from './helpers.js';

const fx = bufferFixture('done');

describe('completion marks', () => {
  it('a record trained on or evicted still answers has() once it has left the stream', async () => {
    const w = await fx.writer();
    for (const id of ['a', 'b', 'c']) await w.write(trajectory({ id }));
    const s = await fx.sampler({ batchSize: 1, prefetch: false, eviction: { maxItems: 2 } });
    const batch = await s.sample({ timeoutMs: 5000 });
    batch.release();
    await s.flush();
    const trained = batch.items[0]!.id;
    const jsm = await jetstreamManager(fx.nc);
    expect((await jsm.streams.info(w.names.stream)).state.messages).toBe(1);
    for (const id of ['a', 'b', 'c']) expect(await w.has(id)).toBe(true);
    expect(await w.has('never-written')).toBe(false);
    expect(trained).not.toBe('a'); // 'a' was evicted when 'c' came: marked as well
    expect(await metricValue(fx.registry, 'laminar_buffer_completion_marks_total', { buffer: fx.buffer, result: 'ok' })).toBe(2);
  });

  it('marks expire after the horizon given at creation', async () => {
    const w = await fx.writer({ completionHorizonMs: 1_000 });
    const jsm = await jetstreamManager(fx.nc);
    const config = (await jsm.streams.info(w.names.doneStream)).config;
    expect([config.max_age, config.max_msgs_per_subject]).toEqual([1_000_000_000, 1]);
    await w.write(trajectory({ id: 'short' }));
    const s = await fx.sampler({ batchSize: 1, prefetch: false });
    (await s.sample({ timeoutMs: 5000 })).release();
    await s.flush();
    expect(await w.has('short')).toBe(true);
    await expect.poll(() => w.has('short'), { timeout: 30_000, interval: 200 }).toBe(false);
  });

  it('the default horizon, and a horizon under a second refused', async () => {
    const w = await fx.writer();
    const jsm = await jetstreamManager(fx.nc);
    expect((await jsm.streams.info(w.names.doneStream)).config.max_age).toBe(DEFAULT_COMPLETION_HORIZON_MS * 1_000_000);
    await expect(ensureBufferStream(jsm, { buffer: `${fx.buffer}x`, completionHorizonMs: 10 })).rejects.toMatchObject({ code: ErrorCodes.BAD_DATA_OPTIONS });
  });

  it('the deleter keeps records whose marks cannot be stored, and deletes them once the marks are in', async () => {
    const jsm = await jetstreamManager(fx.nc);
    const name = `DONE_${fx.buffer}`;
    await jsm.streams.add({ name, subjects: [`${name}.>`] });
    const js = jsm.jetstream();
    for (let i = 0; i < 4; i++) await js.publish(`${name}.m`, new Uint8Array([i]));
    const messages = async (): Promise<number> => (await jsm.streams.info(name)).state.messages;
    let failing = true;
    const calls: string[][] = [];
    const deleter = new RecordDeleter(jsm, name, silentLogger, {
      retryMs: 20,
      markCompleted: (ids) => {
        calls.push([...ids]);
        return failing ? Promise.reject(new Error('nats-server is restarting')) : Promise.resolve();
      },
    });
    const entry = (seq: number, id: string): BufferEntry => ({ seq, id, chunkSeqs: [] }) as unknown as BufferEntry;
    // 1 lies below the bound (purge), 3 above it (single delete).
    deleter.delete([entry(1, 'x'), entry(3, 'y')], () => 2);
    await expect.poll(() => calls.length, { timeout: 5000 }).toBeGreaterThanOrEqual(3);
    expect(await messages()).toBe(4);
    expect(deleter.queued).toBe(2);
    failing = false;
    await expect.poll(() => messages(), { timeout: 5000 }).toBe(2);
    expect(calls.at(-1)).toEqual(['x', 'y']);
    expect(deleter.errors).toBeGreaterThanOrEqual(2);
    await deleter.idle();
  });
});
