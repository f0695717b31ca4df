/**
 * Claim-check payloads in the stream: chunks that a crashed writer left behind are found,
 * counted and deleted, and removing sampled records never takes chunks that a record still
 * needs (a concurrent writer's chunks can sit among older records).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import type { NatsConnection } from '@nats-io/transport-node';
import { headers } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { startNatsServer, type NatsServer } from '../../src/services/index.js';
import { ExperienceSampler, ExperienceWriter, bufferNames, uniform, validateTrajectory } from '../../src/data/index.js';
import { META_HEADER, encodeMeta, metaOf } from '../../src/data/codec/record-meta.js';
import { encodePayload } from '../../src/data/codec/payload.js';
import { metricValue, natsClient, trajectory } from './helpers.js';

let nats: NatsServer;
let nc: NatsConnection;
let registry: Registry;
let buffer: string;
let n = 0;
const CHUNK = 256 * 1024;

beforeAll(async () => {
  // A small max payload, so that modest trajectories are chunked.
  nats = await startNatsServer({ jetstream: true, maxPayload: CHUNK + 8 * 1024 });
  nc = await natsClient(nats.url);
});
afterAll(async () => {
  await nc.close();
  await nats.stop();
});
beforeEach(() => {
  registry = new Registry();
  buffer = `ch${++n}`;
});

async function streamMessages(): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.streams.info(`LAMINAR_EXP_${buffer}`)).state.messages;
}

/** What a writer publishes before its record: the payload in chunks; returns their sequences. */
async function publishChunks(id: string, tokens: number): Promise<{ seqs: number[]; t: ReturnType<typeof validateTrajectory> }> {
  const t = validateTrajectory(trajectory({ id }, tokens));
  const payload = encodePayload(t.tokens, t.logprobs);
  const js = jetstream(nc);
  const seqs: number[] = [];
  for (let off = 0; off < payload.byteLength; off += CHUNK) {
    seqs.push((await js.publish(bufferNames(buffer).chunkSubject(id), payload.subarray(off, Math.min(off + CHUNK, payload.byteLength)))).seq);
  }
  return { seqs, t };
}

describe('claim-check chunks', () => {
  it('chunks of a writer that crashed before its record are found, counted and deleted', async () => {
    const w = await ExperienceWriter.open({ nc, buffer, registry });
    await w.write(trajectory({ id: 'before' }));
    const crashed = await publishChunks('crashed', 100_000); // 800 KB: 4 chunks, then no record
    expect(crashed.seqs).toHaveLength(4);
    const live = await w.write(trajectory({ id: 'big' }, 100_000)); // chunked too, with its record
    expect(live.chunks).toBe(4);
    const s = await ExperienceSampler.open({ nc, buffer, registry, batchSize: 1, prefetch: false, orphanChunkAgeMs: 500 });
    // Young chunks may still get their record: nothing is deleted yet.
    expect(s.stats().orphanChunks).toBe(0);
    await new Promise((r) => setTimeout(r, 700));
    await w.write(trajectory({ id: 'after' })); // server time moves on
    await expect.poll(() => s.stats().orphanChunks).toBe(4);
    expect(await metricValue(registry, 'laminar_buffer_orphan_chunks_total', { buffer })).toBe(4);
    await s.flush();
    expect(await streamMessages()).toBe(1 + 5 + 1); // before, big (4 chunks + record), after
    // The chunks of a record that exists are never taken for orphans.
    expect((await s.sample({ timeoutMs: 5000 })).items[0]!.id).toBe('before');
    const big = (await s.sample({ timeoutMs: 5000 })).items[0]!;
    expect(big.id).toBe('big');
    expect(big.tokens[99_999]).toBe(99_999 + 100);
    expect(s.stats().orphanChunks).toBe(4);
    await s.close();
  });

  it('removing sampled records keeps the chunks of a record written later', async () => {
    const w = await ExperienceWriter.open({ nc, buffer, registry });
    await w.write(trajectory({ id: 'a' }));
    // A concurrent writer: its chunks land between older records, its record after them.
    const { seqs, t } = await publishChunks('c', 100_000);
    await w.write(trajectory({ id: 'b' }));
    const h = headers();
    h.set(META_HEADER, encodeMeta(metaOf(t, seqs)));
    await jetstream(nc).publish(bufferNames(buffer).recordSubject('c'), undefined, { headers: h, msgID: 'c', expect: { lastSubjectSequence: 0 } });
    const s = await ExperienceSampler.open({ nc, buffer, registry, batchSize: 1, prefetch: false });
    expect((await s.sample({ timeoutMs: 5000 })).items[0]!.id).toBe('a');
    expect((await s.sample({ timeoutMs: 5000 })).items[0]!.id).toBe('b');
    await s.flush();
    expect(await streamMessages()).toBe(seqs.length + 1); // only c: its chunks and its record
    const c = (await s.sample({ timeoutMs: 5000 })).items[0]!;
    expect(c.id).toBe('c');
    expect(Array.from(c.tokens.subarray(99_990))).toEqual(Array.from(t.tokens.subarray(99_990)));
    await s.flush();
    expect(await streamMessages()).toBe(0);
    await s.close();
  });

  it('chunked payloads sampled at random are assembled intact, a few direct gets at a time', async () => {
    const w = await ExperienceWriter.open({ nc, buffer, registry });
    const sizes = [40_000, 90_000, 33_000, 120_000, 70_000, 65_536];
    for (const [i, tokens] of sizes.entries()) expect((await w.write(trajectory({ id: `r${i}` }, tokens))).chunks).toBe(Math.ceil((tokens * 8) / CHUNK));
    await w.write(trajectory({ id: 'small' }));
    const s = await ExperienceSampler.open({ nc, buffer, registry, batchSize: 5, strategy: uniform(), seed: 3, fetchConcurrency: 2, prefetch: false });
    const b = await s.sample({ timeoutMs: 10_000 });
    expect(b.items).toHaveLength(5);
    for (const it of b.items) {
      const tokens = it.id === 'small' ? 12 : sizes[Number(it.id.slice(1))]!;
      const want = validateTrajectory(trajectory({ id: it.id }, tokens));
      expect(it.tokens.length).toBe(tokens);
      expect(Buffer.from(it.tokens.buffer, it.tokens.byteOffset, it.tokens.byteLength).equals(Buffer.from(want.tokens.buffer))).toBe(true);
      expect(Buffer.from(it.logprobs.buffer, it.logprobs.byteOffset, it.logprobs.byteLength).equals(Buffer.from(want.logprobs.buffer))).toBe(true);
    }
    expect(b.bytes).toBe(b.items.reduce((n, it) => n + it.tokens.length * 8, 0));
    await s.close();
  });
});
