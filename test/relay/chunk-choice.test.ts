/**
 * The chunk size chosen for the chain (`--chunk-size auto`, the default), with real relays on
 * loopback (in-process, UCX over TCP): a version published at the master of a chain of 4 is cut
 * as appendix C's model says for p = 4 and the master's link estimate, every relay keeps that
 * chunking, the estimate takes the master's first hop in and decides the next version's chunk, a
 * remote push is cut as the master advises (p + 1), and `--chunk-size 32MiB` or a publisher's
 * own chunk size still wins.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUTO_MAX_CHUNK, chooseChunkSize } from '../../src/relay/chunking/chunk-choice.js';
import { describeChunking } from '../../src/relay/chunking/describe.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { ChunkingStatus } from '../../src/relay/protocol/status.js';
import type { Relay } from '../../src/relay/daemon.js';
import type { RelayOptionsInput } from '../../src/relay/options.js';
import { SECRET, buildVersion } from '../helpers/broadcast.js';
import { inProcessRelay, loopbackChain, metricValue, publishVisible, relayChunking, tempShmDir, until } from '../helpers/relay.js';

process.env.UCX_TLS ??= 'tcp';

const MiB = 2 ** 20;
/**
 * Big enough that its hop is timed (link-estimator.ts: at least 16 MiB and 10 ms; loopback UCX over
 * TCP carries 1-4 GB/s on the development VM: 25-100 ms), small enough for four relays' /dev/shm.
 */
const BYTES = 96 * MiB;

function tensors(version: number, bytes = BYTES): { name: string; dtype: 'U8'; shape: number[]; data: Uint8Array }[] {
  const data = new Uint8Array(bytes);
  data[0] = version;
  data[bytes - 1] = version;
  return [{ name: 'w', dtype: 'U8', shape: [bytes], data }];
}

/** What the model gives for `bytes` over `p` relays with the inputs a relay reports. */
function modelChunk(bytes: number, p: number, c: ChunkingStatus): number {
  return chooseChunkSize(bytes, p, { bandwidth: c.bandwidth, startup: c.chunkCost }).chunkSize;
}

/** Starts a chain of `n` relays on loopback (a static plan, epoch 1); `extra(i)` adds options per relay. */
async function startChain(n: number, extra: (i: number) => RelayOptionsInput = () => ({})): Promise<{ relays: Relay[]; close(): Promise<void> }> {
  const dirs: { cleanup(): void }[] = [];
  const relays: Relay[] = [];
  const close = async (): Promise<void> => {
    for (const r of relays) await r.close();
    for (const d of dirs) d.cleanup();
  };
  try {
    await loopbackChain(n, async (i, listen) => {
      const shm = tempShmDir();
      dirs.push(shm);
      const options = { relayId: `c${i}`, listen, secret: SECRET, pin: false, keepVersions: 0, spareSegments: 0, retryInterval: '200ms', peerTimeout: '5s' };
      const relay = await inProcessRelay(shm.dir, { ...options, ...extra(i) });
      relays.push(relay);
      return relay;
    });
    await until('the chain to connect', () => relays.slice(0, -1).every((r, i) => r.broadcaster?.status().downstream?.id === `c${i + 1}`) || undefined);
  } catch (err) {
    await close();
    throw err;
  }
  return { relays, close };
}

/** Waits until every relay holds `version` complete; returns their chunk sizes. */
async function chunkSizesOf(relays: Relay[], version: number): Promise<number[]> {
  return until(`version ${version} on every relay`, () => {
    const held = relays.map((r) => r.store.latest('m'));
    return held.every((v) => v?.version === version && v.state === 'complete') ? held.map((v) => v!.layout.chunkSize) : undefined;
  });
}

describe('chunk size chosen for the chain (no chunk flag)', () => {
  let chain: Awaited<ReturnType<typeof startChain>> | undefined;
  const scratch = tempShmDir('laminar-chunk-choice-');
  beforeAll(async () => {
    chain = await startChain(4);
  });
  afterAll(async () => {
    await chain?.close();
    scratch.cleanup();
  });

  it("cuts a version as the model gives for p = 4, keeps that chunking down the chain, and takes the master's hop into the next choice", async () => {
    const [master] = chain!.relays as [Relay, ...Relay[]];
    const before = await relayChunking(master);
    // Loopback reports no speed and nothing was sent yet: the stated defaults.
    expect(before).toMatchObject({ mode: 'auto', p: 4, bandwidthSource: 'default', chunkCostSource: 'default', measured: { hops: 0 }, last: null });
    expect((await relayChunking(chain!.relays[2]!)).p).toBe(2);
    const expected1 = modelChunk(BYTES, 4, before);
    expect(expected1).toBeLessThan(AUTO_MAX_CHUNK);

    const client = await RelayClient.connect({ socketPath: master.options.socketPath });
    try {
      const published = await publishVisible(client, { model: 'm', version: 1, tensors: tensors(1) });
      expect(published.chunkSize).toBe(expected1);
      // Downstream relays keep the chunking they were offered (p = 3, 2 and 1 there would say otherwise).
      expect(await chunkSizesOf(chain!.relays, 1)).toEqual([expected1, expected1, expected1, expected1]);
      const metrics = await master.registry.metrics();
      expect(metricValue(metrics, 'laminar_relay_chunk_bytes')).toBe(expected1);
      expect(metricValue(metrics, 'laminar_relay_chunk_model_relays')).toBe(4);

      // The master's hop to c1 is its first measurement: the bandwidth is measured from now on.
      const after = await until('the master to time its hop', async () => {
        const c = await relayChunking(master);
        return c.measured.hops === 1 ? c : undefined;
      });
      expect(after).toMatchObject({ bandwidthSource: 'measured', chunkCostSource: 'default', last: { bytes: BYTES, p: 4, chunkSize: expected1 } });
      expect(after.bandwidth).not.toBe(before.bandwidth);
      expect(metricValue(await master.registry.metrics(), 'laminar_relay_link_measured_bandwidth_bytes_per_second')).toBeCloseTo(after.bandwidth, -3);
      expect(metricValue(await master.registry.metrics(), 'laminar_relay_link_hops_measured_total', 'result="used"')).toBe(1);
      expect(describeChunking(after)).toContain('now p=4');

      const expected2 = modelChunk(BYTES, 4, after);
      const second = await publishVisible(client, { model: 'm', version: 2, tensors: tensors(2) });
      expect(second.chunkSize).toBe(expected2);
      // Whatever the chunk, the same segment size: a spare sized by the last version fits.
      expect(second.size).toBe(published.size);
      expect(await chunkSizesOf(chain!.relays, 2)).toEqual([expected2, expected2, expected2, expected2]);
      expect(describeChunking(await relayChunking(master))).toMatch(
        /^chunk [\d.]+ MiB for 96\.0 MiB \(auto: p=4, [\d.]+ GB\/s measured, 250 us\/chunk default\)/,
      );

      // A publisher's own chunk size still wins.
      const [w] = tensors(3);
      const publication = await client.beginPublish({
        model: 'm',
        version: 3,
        tensors: [{ name: w!.name, dtype: w!.dtype, shape: w!.shape }],
        chunkSize: 8 * MiB,
      });
      publication.write('w', w!.data);
      expect((await (await publication.commit()).visible).chunkSize).toBe(8 * MiB);
      expect(await chunkSizesOf(chain!.relays, 3)).toEqual([8 * MiB, 8 * MiB, 8 * MiB, 8 * MiB]);

      // A checkpoint the master adopts is cut by the model too.
      const inputs = await until('the third hop to be taken in', async () => {
        const c = await relayChunking(master);
        return c.measured.hops === 3 ? c : undefined;
      });
      // Laid out in 12 KiB chunks, which auto never picks: the adopted version's chunking is the master's.
      const checkpoint = buildVersion('org/ckpt', 1, 40 * MiB, 12 * 1024, 7);
      const file = join(scratch.dir, 'model.safetensors');
      try {
        writeFileSync(file, new Uint8Array(checkpoint.mapping.view(0, checkpoint.layout.totalSize)));
      } finally {
        checkpoint.mapping.close();
      }
      const adopted = await client.publishFile(file, { model: 'm', version: 4 });
      expect(adopted.chunkSize).toBe(modelChunk(40 * MiB, 4, inputs));
      expect(adopted.chunkSize).toBeGreaterThanOrEqual(MiB);
    } finally {
      client.close();
    }
  });

  it('cuts a remote push as the master advises, the publisher being one more hop (p + 1)', async () => {
    const [master] = chain!.relays as [Relay, ...Relay[]];
    const address = master.broadcaster!.status().port;
    // The inputs once the master has taken in its three hops so far.
    const inputs = await until('the hops of the first test to be taken in', async () => {
      const c = await relayChunking(master);
      return c.measured.hops === 4 && master.broadcaster?.busy === false ? c : undefined;
    });
    const publisher = await RelayClient.remote({ address: `127.0.0.1:${address}`, secret: SECRET, relayId: 'c0' });
    try {
      const bytes = 40 * MiB;
      const expected = modelChunk(bytes, 5, inputs);
      expect(await publisher.chunkAdviceFor(bytes)).toBe(expected);
      const result = await publisher.publish({ model: 'm', version: 10, tensors: tensors(10, bytes) });
      expect(result.chunks).toBe(Math.ceil(bytes / expected));
      expect(await chunkSizesOf(chain!.relays, 10)).toEqual([expected, expected, expected, expected]);
    } finally {
      await publisher.close();
    }
  });
});

describe('--chunk-size overrides the choice', () => {
  it('cuts every version in 32 MiB at a master started with --chunk-size 32MiB, however long the chain', async () => {
    const fixed = await startChain(3, (i) => (i === 0 ? { chunkSize: '32MiB' } : {}));
    try {
      const [master] = fixed.relays as [Relay, ...Relay[]];
      expect(await relayChunking(master)).toMatchObject({ mode: 'fixed', chunkSize: 32 * MiB, p: 3 });
      // What auto would have given: far smaller.
      expect(modelChunk(BYTES, 3, await relayChunking(fixed.relays[1]!))).toBeLessThan(32 * MiB);
      const client = await RelayClient.connect({ socketPath: master.options.socketPath });
      try {
        await publishVisible(client, { model: 'm', version: 1, tensors: tensors(1) });
      } finally {
        client.close();
      }
      expect(await chunkSizesOf(fixed.relays, 1)).toEqual([32 * MiB, 32 * MiB, 32 * MiB]);
      // A remote publisher is told the fixed size too.
      const publisher = await RelayClient.remote({ address: `127.0.0.1:${master.broadcaster!.status().port}`, secret: SECRET });
      try {
        expect(await publisher.chunkAdviceFor(BYTES)).toBe(32 * MiB);
      } finally {
        await publisher.close();
      }
    } finally {
      await fixed.close();
    }
  });
});
