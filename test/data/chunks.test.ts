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
import { delay } from '../../src/common/concurrency.js';
import { metricValue, natsClient, trajectory } from './helpers.js';
import { HEADER_ROOM } from '../../src/data/codec/payload.js';

let nats: NatsServer;
let nc: NatsConnection;
let registry: Registry;
let buffer: string;
let n = 0;
const CHUNK = 256 * 1024;

beforeAll(async () => {
  // A small max payload, so that modest trajectories are chunked.
  nats = await startNatsServer({ jetstream: true, maxPayload: CHUNK + HEADER_ROOM });
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

/** The sequence of the stream's newest message. */
async function lastSeq(): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.streams.info(`LAMINAR_EXP_${buffer}`)).state.last_seq;
}

/**
 * When the server stored a message (ms since the epoch, sub-millisecond digits kept): the clock
 * that orphan chunk ages are measured on.
 */
async function storedAt(seq: number): Promise<number> {
  const jsm = await jetstreamManager(nc);
  const message = await jsm.streams.getMessage(`LAMINAR_EXP_${buffer}`, { seq });
  if (message === null) throw new Error(`no message ${seq} in the stream`);
  const time = message.timestamp; // RFC 3339, nanoseconds
  const [, whole, fraction] = /^(.*?)(?:\.(\d+))?Z$/.exec(time) ?? [];
  if (whole === undefined) throw new Error(`unexpected stream timestamp ${time}`);
  return Date.parse(`${whole}Z`) + Number(`0.${fraction ?? '0'}`) * 1000;
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
    // A chunk's age is server time: the newest message the sampler has seen against the chunk's own.
    // Writing 'big' takes what it takes on a loaded machine, so the age is set from the ages the
    // sampler will find at open: older than that, and no crashed chunk is an orphan yet.
    const [firstCrashedAt, lastCrashedAt, newestAtOpen] = await Promise.all([
      storedAt(crashed.seqs[0]!),
      storedAt(crashed.seqs.at(-1)!),
      lastSeq().then((seq) => storedAt(seq)),
    ]);
    const orphanChunkAgeMs = Math.ceil(newestAtOpen - firstCrashedAt) + 250;
    const s = await ExperienceSampler.open({ nc, buffer, registry, batchSize: 1, prefetch: false, orphanChunkAgeMs });
    // Young chunks may still get their record: nothing is deleted yet.
    expect(s.stats().orphanChunks).toBe(0);
    // Server time moves on only with a message: the next one is stored once even the last crashed
    // chunk is older than the age. (The wait is for the age itself; nats-server shares this clock.)
    const due = lastCrashedAt + orphanChunkAgeMs + 1;
    await delay(Math.max(0, due - Date.now()));
    const after = await w.write(trajectory({ id: 'after' }));
    expect(await storedAt(after.seq), 'the last message is not past the age').toBeGreaterThanOrEqual(due);
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
