/**
 * Start-up after a crash: the newest version of each model is verified before the store is
 * ready, older kept ones in the background, and those retention would drop are never read.
 */
import { closeSync, existsSync, openSync, readdirSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/common/logger.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { RelayMetrics } from '../../src/relay/metrics.js';
import { parseRelayOptions } from '../../src/relay/options.js';
import { VersionStore } from '../../src/relay/store.js';
import { inProcessRelay, metricValue, publishVisible, SMALL_PAGES, tempShmDir } from '../helpers/relay.js';

const weights = (v: number) => [{ name: 'w', dtype: 'U8' as const, shape: [256 * 1024], data: new Uint8Array(256 * 1024).fill(v) }];

describe('relay start-up after a crash', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let segments: string;
  let stores: VersionStore[] = [];
  beforeEach(() => {
    tmp = tempShmDir();
    segments = join(tmp.dir, 'segments');
    stores = [];
  });
  afterEach(async () => {
    for (const s of stores) await s.close();
    tmp.cleanup();
  });

  /** Versions 1..n of model m on disk as a crashed relay leaves them (no clean-stop record). */
  async function crashedWith(versions: number[], keepVersions = 5): Promise<void> {
    const relay = await inProcessRelay(tmp.dir, { keepVersions, spareSegments: 0, chunkSize: '64KiB' });
    const client = await RelayClient.connect({ socketPath: relay.options.socketPath, reconnect: false });
    for (const v of versions) await publishVisible(client, { model: 'm', version: v, tensors: weights(v) });
    client.close();
    await relay.close();
    segments = relay.store.options.shmDir; // the relay's huge-page mount, where it made one
    unlinkSync(join(segments, 'clean-shutdown.json'));
  }

  function openStore(keepVersions: number): { store: VersionStore; registry: Registry } {
    const registry = new Registry();
    const options = parseRelayOptions({ shmDir: segments, keepVersions, spareSegments: 1, pin: false });
    const store = new VersionStore({ ...options, pages: SMALL_PAGES, logger: silentLogger, metrics: new RelayMetrics(registry, () => null) });
    stores.push(store);
    return { store, registry };
  }

  function corrupt(version: number): void {
    const path = join(segments, `m.v${version}.safetensors`);
    const fd = openSync(path, 'r+');
    writeSync(fd, Buffer.from([0xee]), 0, 1, statSync(path).size - 5);
    closeSync(fd);
  }

  const recoveredCount = async (registry: Registry, result: string): Promise<number> =>
    metricValue(await registry.metrics(), 'laminar_relay_recovered_versions_total', `result="${result}"`);

  it('serves the newest version at once and the older ones once verified; an acquire of one waits for it', async () => {
    await crashedWith([1, 2, 3]);
    const { store, registry } = openStore(2);
    expect(await store.init()).toEqual({ recovered: 1, discarded: 0, verifying: 2 });
    expect(store.list().map((v) => [v.version, v.state])).toEqual([[3, 'complete']]);
    expect(store.verifyingVersions().map((v) => v.version)).toEqual([2, 1]);
    expect(store.usedBytes()).toBeGreaterThanOrEqual(3 * 256 * 1024);
    // A version being verified is not handed out and not accepted again from a peer...
    await expect(store.find({ model: 'm', version: 1 })).rejects.toMatchObject({ code: 'ERR_UNKNOWN_VERSION' });
    await expect(store.beginReceive({ model: 'm', version: 1 } as never)).rejects.toMatchObject({ code: 'ERR_VERSION_EXISTS' });
    // ...but an acquire that may wait gets it once it passed.
    const v1 = await store.find({ model: 'm', version: 1, timeoutMs: 10_000 });
    expect([v1.version, v1.state]).toEqual([1, 'complete']);
    await store.recovered();
    expect(store.verifyingVersions()).toEqual([]);
    expect(store.list().map((v) => v.version)).toEqual([1, 2, 3]);
    expect(await recoveredCount(registry, 'adopted')).toBe(3);
  });

  it('does not read versions that retention would drop, and falls back to an older newest when the newest is corrupt', async () => {
    await crashedWith([1, 2, 3, 4]);
    corrupt(4);
    corrupt(1);
    const { store, registry } = openStore(2); // keeps the newest and 2 more: v1 is beyond
    expect(await store.init()).toEqual({ recovered: 1, discarded: 1, verifying: 1 });
    expect(store.list().map((v) => v.version)).toEqual([3]);
    expect(existsSync(join(segments, 'm.v4.safetensors'))).toBe(false);
    await store.recovered();
    expect(store.list().map((v) => v.version)).toEqual([2, 3]);
    expect(await recoveredCount(registry, 'beyond_retention')).toBe(1);
    expect(await recoveredCount(registry, 'corrupt_deleted')).toBe(1); // v4; v1 was never read
    expect(await recoveredCount(registry, 'adopted')).toBe(2);
    // v1's file became the spare segment (spareSegments 1), its name is gone.
    expect(readdirSync(segments).filter((f) => f.startsWith('m.v'))).toEqual(['m.v2.safetensors', 'm.v3.safetensors']);
  });

  it('an older version that fails in the background is deleted; the newest stays served', async () => {
    await crashedWith([1, 2]);
    corrupt(1);
    const { store, registry } = openStore(2);
    await store.init();
    await store.recovered();
    expect(store.list().map((v) => v.version)).toEqual([2]);
    expect(existsSync(join(segments, 'm.v1.safetensors'))).toBe(false);
    expect(await recoveredCount(registry, 'corrupt_deleted')).toBe(1);
  });

  it('a stop during the background verification keeps the unverified files for the next start', async () => {
    await crashedWith([1, 2, 3]);
    const { store } = openStore(2);
    await store.init();
    await store.close();
    await store.recovered();
    expect(
      readdirSync(segments)
        .filter((f) => f.startsWith('m.v'))
        .sort(),
    ).toEqual(['m.v1.safetensors', 'm.v2.safetensors', 'm.v3.safetensors']);
    // Only v3 was adopted: the record lets the next start skip reading it, and only it.
    const next = openStore(2);
    expect(await next.store.init()).toMatchObject({ recovered: 1, verifying: 2 });
    expect(await recoveredCount(next.registry, 'adopted_clean')).toBe(1);
    await next.store.recovered();
    expect(next.store.list().map((v) => v.version)).toEqual([1, 2, 3]);
  });
});
