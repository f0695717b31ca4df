import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Relay } from '../../src/relay/daemon.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { RelayOptionsInput } from '../../src/relay/options.js';
import { inProcessRelay, metricValue, metricsText, publishVisible, tempShmDir, until } from '../helpers/relay.js';

const MODEL = 'org/spare';

/** One tensor of `bytes` bytes, every byte derived from the version (so stale bytes would show). */
function weights(version: number, bytes = 256 * 1024): { name: string; dtype: 'U8'; shape: number[]; data: Uint8Array }[] {
  return [{ name: 'w', dtype: 'U8', shape: [bytes], data: Uint8Array.from({ length: bytes }, (_, i) => (i * 7 + version * 13) & 0xff) }];
}

function spareFiles(dir: string): string[] {
  return readdirSync(dir).filter((f) => f.endsWith('.segment.spare'));
}

describe('relay: spare segments (pages of retired versions reused)', () => {
  let tmp: ReturnType<typeof tempShmDir> | null = null;
  let relay: Relay | null = null;
  let client: RelayClient | null = null;

  async function start(options: RelayOptionsInput): Promise<{ relay: Relay; client: RelayClient; dir: string }> {
    tmp ??= tempShmDir();
    relay = await inProcessRelay(tmp.dir, { chunkSize: 64 * 1024, spareQuiet: '200ms', ...options });
    client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    return { relay, client, dir: relay.store.options.shmDir };
  }

  afterEach(async () => {
    client?.close();
    await relay?.close();
    tmp?.cleanup();
    [tmp, relay, client] = [null, null, null];
  });

  async function expectVersion(c: RelayClient, version: number): Promise<void> {
    await using lease = await c.acquire({ model: MODEL, version });
    await lease.verify();
    expect(Buffer.from(lease.bytes('w')).equals(Buffer.from(weights(version)[0]!.data))).toBe(true);
  }

  it("prepares a spare while idle, and each next version takes the spare or a retired version's file", async () => {
    const { relay, client, dir } = await start({ keepVersions: 0 });
    await publishVisible(client, { model: MODEL, version: 1, tensors: weights(1) });
    const spare = await until('a prepared spare', () => (spareFiles(dir).length === 1 ? spareFiles(dir)[0] : undefined));
    expect(statSync(join(dir, spare)).size).toBe((await client.status()).versions[0]!.size);
    expect((await client.status()).spares).toMatchObject({ count: 1 });
    for (let v = 2; v <= 6; v++) {
      await publishVisible(client, { model: MODEL, version: v, tensors: weights(v) });
      await expectVersion(client, v);
    }
    const text = await metricsText(relay.metricsPort!);
    // v2 took the prepared spare; every later version took the file v-2 left when it retired.
    expect(metricValue(text, 'laminar_relay_spare_segments_total', 'event="prepared"')).toBe(1);
    expect(metricValue(text, 'laminar_relay_spare_segments_total', 'event="reused"')).toBe(5);
    expect(metricValue(text, 'laminar_relay_spare_segments_total', 'event="kept"')).toBeGreaterThanOrEqual(4);
    // Never more than the latest version, the one arriving and one spare.
    expect(readdirSync(dir).filter((f) => f.endsWith('.safetensors'))).toEqual(['org~2fspare.v6.safetensors']);
    expect(spareFiles(dir).length).toBeLessThanOrEqual(1);
    const status = await client.status();
    expect(status.usedBytes).toBe(status.versions[0]!.size + status.spares.bytes);
  });

  it('never recycles a leased version: its reader keeps the bytes it leased', async () => {
    const { client, dir } = await start({ keepVersions: 0 });
    await publishVisible(client, { model: MODEL, version: 1, tensors: weights(1) });
    const held = await client.acquire({ model: MODEL, version: 1 });
    for (let v = 2; v <= 5; v++) await publishVisible(client, { model: MODEL, version: v, tensors: weights(v) });
    await held.verify();
    expect(Buffer.from(held.bytes('w')).equals(Buffer.from(weights(1)[0]!.data))).toBe(true);
    expect((await client.status()).versions.map((v) => v.version)).toEqual([1, 5]);
    await held.release();
    await until('v1 retired into the pool', async () => ((await client.status()).versions.length === 1 ? true : undefined));
    expect(spareFiles(dir).length).toBe(1);
    await publishVisible(client, { model: MODEL, version: 6, tensors: weights(6) });
    await expectVersion(client, 6);
  });

  it('uses a spare only when it is large enough, and cuts a larger one to size', async () => {
    const { relay, client, dir } = await start({ keepVersions: 0 });
    const reused = async (): Promise<number> => metricValue(await metricsText(relay.metricsPort!), 'laminar_relay_spare_segments_total', 'event="reused"');
    await publishVisible(client, { model: MODEL, version: 1, tensors: weights(1) });
    await until('a prepared spare', () => (spareFiles(dir).length === 1 ? true : undefined));
    await publishVisible(client, { model: MODEL, version: 2, tensors: weights(2, 512 * 1024) });
    expect(await reused()).toBe(0); // the spare is too small for v2
    await publishVisible(client, { model: MODEL, version: 3, tensors: weights(3) });
    expect(await reused()).toBe(1); // v3 fits the spare exactly
    // v2 retired when v3 completed: its larger file is the spare now, and v4 takes it cut to size.
    await until('v2 kept as a spare', () => (spareFiles(dir).length === 1 ? true : undefined));
    await publishVisible(client, { model: MODEL, version: 4, tensors: weights(4) });
    expect(await reused()).toBe(2);
    const size = (await client.status()).versions.find((v) => v.version === 4)!.size;
    expect(statSync(join(dir, 'org~2fspare.v4.safetensors')).size).toBe(size);
    await expectVersion(client, 4);
  });

  it('drops spares first when a publication needs room under the memory budget', async () => {
    // Room for two versions of ~256 KiB: the latest and one arriving; the spare must go.
    const { relay, client, dir } = await start({ keepVersions: 0, memoryBudget: 600 * 1024 });
    await publishVisible(client, { model: MODEL, version: 1, tensors: weights(1) });
    await until('a prepared spare', () => (spareFiles(dir).length === 1 ? true : undefined));
    const bigger = weights(2, 300 * 1024);
    await publishVisible(client, { model: MODEL, version: 2, tensors: bigger });
    const text = await metricsText(relay.metricsPort!);
    expect(metricValue(text, 'laminar_relay_spare_segments_total', 'event="dropped"')).toBe(1);
    const status = await client.status();
    expect(status.usedBytes).toBeLessThanOrEqual(600 * 1024);
    // And no spare is prepared beyond the budget either: nothing to wait for but the quiet
    // period (spareQuiet 200 ms) passing, three times over, without one.
    await new Promise((r) => setTimeout(r, 600));
    expect((await client.status()).usedBytes).toBeLessThanOrEqual(600 * 1024);
  });

  it('keeps no spare with --spare-segments 0', async () => {
    const { relay, client, dir } = await start({ keepVersions: 0, spareSegments: 0 });
    for (let v = 1; v <= 4; v++) await publishVisible(client, { model: MODEL, version: v, tensors: weights(v) });
    // An absence: three quiet periods (200 ms) pass without a spare.
    await new Promise((r) => setTimeout(r, 600));
    expect(spareFiles(dir)).toEqual([]);
    const text = await metricsText(relay.metricsPort!);
    expect(metricValue(text, 'laminar_relay_spare_segments_total', 'event="reused"')).toBe(0);
    await expectVersion(client, 4);
  });

  it('adopts its spare after a restart, and the next version reuses it', async () => {
    let { relay: r, client: c, dir } = await start({ keepVersions: 0 });
    await publishVisible(c, { model: MODEL, version: 1, tensors: weights(1) });
    await until('a prepared spare', () => (spareFiles(dir).length === 1 ? true : undefined));
    c.close();
    await r.close();
    ({ relay: r, client: c, dir } = await start({ keepVersions: 0 }));
    expect((await c.status()).spares).toMatchObject({ count: 1 });
    await publishVisible(c, { model: MODEL, version: 2, tensors: weights(2) });
    expect(metricValue(await metricsText(r.metricsPort!), 'laminar_relay_spare_segments_total', 'event="reused"')).toBe(1);
    await expectVersion(c, 2);
  });
});
