/**
 * Version directories across relay restarts (real relay processes, SIGTERM and SIGKILL), at
 * start-up after a crash (the store itself, to see versions while they are verified), and a bad
 * `--engine-files` refused at start.
 */
import { execFile } from 'node:child_process';
import { closeSync, existsSync, linkSync, lstatSync, mkdirSync, openSync, readdirSync, statSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/common/logger.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { RelayMetrics } from '../../src/relay/metrics.js';
import { parseRelayOptions } from '../../src/relay/options.js';
import { VersionStore } from '../../src/relay/store.js';
import { CLI, inProcessRelay, metricValue, metricsText, spawnRelay, publishVisible, SMALL_PAGES, tempShmDir, type RelayProcess } from '../helpers/relay.js';
import { LINKED_ENGINE_FILES, checkDirsTruthful, engineFilesDir, versionDirs } from '../helpers/version-dirs.js';

const run = promisify(execFile);

const weights = (v: number) => [{ name: 'w', dtype: 'U8' as const, shape: [64 * 1024], data: new Uint8Array(64 * 1024).fill(v) }];

/** The relay's status once the versions it found at start-up are all verified. */
async function verified(client: RelayClient): Promise<Awaited<ReturnType<RelayClient['status']>>> {
  for (;;) {
    const status = await client.status();
    if (status.verifying.length === 0) return status;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('version directories across restarts', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let engine: ReturnType<typeof engineFilesDir>;
  let relays: RelayProcess[] = [];
  let clients: RelayClient[] = [];
  beforeEach(() => {
    tmp = tempShmDir();
    engine = engineFilesDir();
    relays = [];
    clients = [];
  });
  afterEach(async () => {
    for (const c of clients) c.close();
    await Promise.all(relays.map((r) => r.stop('SIGKILL')));
    tmp.cleanup();
    engine.cleanup();
  });

  async function relay(args: string[]): Promise<{ relay: RelayProcess; client: RelayClient }> {
    const r = await spawnRelay(tmp.dir, ['--no-pin', '--keep-versions', '5', '--chunk-size', '16KiB', ...args]);
    relays.push(r);
    const client = await RelayClient.connect({ socketPath: r.socketPath, reconnect: false });
    clients.push(client);
    return { relay: r, client };
  }

  const dirOf = (shmDir: string, v: number): string => join(shmDir, 'models', 'm', `v${v}`);

  it('keeps the directories across a clean stop, and rebuilds them when the engine files change', async () => {
    const first = await relay(['--engine-files', engine.dir]);
    for (const v of [1, 2]) await publishVisible(first.client, { model: 'm', version: v, tensors: weights(v) });
    const shm = first.relay.shmDir;
    const dirInodes = [1, 2].map((v) => statSync(dirOf(shm, v)).ino);
    expect(await first.relay.stop('SIGTERM')).toBe(0);
    // Stopped: complete versions stay, with their directories, for the next start.
    expect(versionDirs(shm).map((d) => d.version)).toEqual([1, 2]);

    const second = await relay(['--engine-files', engine.dir]);
    const text = await metricsText(second.relay.metricsPort);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="adopted_clean"')).toBe(2);
    expect(metricValue(text, 'laminar_relay_version_dirs')).toBe(2);
    // The same directories (not made again): an engine pointed at one reads on across the restart.
    expect([1, 2].map((v) => statSync(dirOf(shm, v)).ino)).toEqual(dirInodes);
    checkDirsTruthful(shm);
    const lease = await second.client.acquire({ model: 'm', version: 1 });
    expect(lease.dir).toBe(dirOf(shm, 1));
    await lease.release();
    expect(await second.relay.stop('SIGTERM')).toBe(0);

    // Without --engine-files now: each directory is rebuilt with the weights alone.
    const third = await relay([]);
    expect(metricValue(await metricsText(third.relay.metricsPort), 'laminar_relay_recovered_versions_total', 'result="adopted_clean"')).toBe(2);
    for (const v of [1, 2]) expect(readdirSync(dirOf(shm, v))).toEqual(['model.safetensors']);
    checkDirsTruthful(shm);
    expect(await third.relay.stop('SIGTERM')).toBe(0);

    // And with them again: the links come back.
    await relay(['--engine-files', engine.dir]);
    for (const v of [1, 2]) expect(readdirSync(dirOf(shm, v)).sort()).toEqual([...LINKED_ENGINE_FILES, 'model.safetensors'].sort());
  });

  it('after a crash, removes stale and half-made directories at start and makes them again once their versions are verified', async () => {
    const first = await relay(['--engine-files', engine.dir]);
    for (const v of [1, 2, 3]) await publishVisible(first.client, { model: 'm', version: v, tensors: weights(v) });
    const shm = first.relay.shmDir;
    expect(first.relay.child.kill('SIGKILL')).toBe(true);
    expect(await first.relay.exited).toBe('SIGKILL');

    // While no relay runs: v1's segment disappears (its directory is now of a version gone), a
    // directory of a version that never was links v2's file, a crash left a half-made directory,
    // and someone left a file of their own.
    unlinkSync(join(shm, 'm.v1.safetensors'));
    mkdirSync(dirOf(shm, 9));
    linkSync(join(shm, 'm.v2.safetensors'), join(dirOf(shm, 9), 'model.safetensors'));
    const halfMade = join(shm, 'models', 'm', '.v3.4242.1.new');
    mkdirSync(halfMade);
    linkSync(join(shm, 'm.v3.safetensors'), join(halfMade, 'model.safetensors'));
    writeFileSync(join(shm, 'models', 'm', 'notes.txt'), "not the relay's");

    const second = await relay(['--engine-files', engine.dir]);
    const status = await verified(second.client);
    expect(status.versions.map((v) => [v.version, v.dir])).toEqual([
      [2, dirOf(shm, 2)],
      [3, dirOf(shm, 3)],
    ]);
    expect(existsSync(dirOf(shm, 1))).toBe(false);
    expect(existsSync(dirOf(shm, 9))).toBe(false);
    expect(existsSync(halfMade)).toBe(false);
    expect(existsSync(join(shm, 'models', 'm', 'notes.txt'))).toBe(true);
    expect(versionDirs(shm).map((d) => d.version)).toEqual([2, 3]);
    for (const v of [2, 3]) {
      expect(statSync(join(shm, `m.v${v}.safetensors`)).nlink).toBe(2);
      expect(readdirSync(dirOf(shm, v)).sort()).toEqual([...LINKED_ENGINE_FILES, 'model.safetensors'].sort());
    }
    checkDirsTruthful(shm);
  });

  it('refuses a bad --engine-files at start with ERR_BAD_ENGINE_FILES', async () => {
    const file = join(tmp.dir, 'a-file');
    writeFileSync(file, 'x');
    const noConfig = join(tmp.dir, 'no-config');
    mkdirSync(noConfig);
    writeFileSync(join(noConfig, 'tokenizer.json'), '{}');
    for (const [bad, why] of [
      [join(tmp.dir, 'missing'), /no such directory/],
      [file, /not a directory/],
      [noConfig, /holds no config\.json/],
    ] as const) {
      const failed = await run(
        process.execPath,
        [CLI, 'relay', '--shm-dir', join(tmp.dir, 'segments'), '--socket', join(tmp.dir, 'relay.sock'), '--metrics-port', '-1', '--engine-files', bad],
        { timeout: 30_000 },
      ).then(
        () => null,
        (err: unknown) => err as { code: number; stderr: string },
      );
      expect(failed?.code, bad).toBe(1);
      expect(failed?.stderr).toMatch(/ERR_BAD_ENGINE_FILES/);
      expect(failed?.stderr).toMatch(why);
    }
    // Nothing was started: no lock, no socket left behind.
    expect(existsSync(join(tmp.dir, 'relay.sock'))).toBe(false);
    expect(existsSync(join(tmp.dir, 'segments', 'relay.pid'))).toBe(false);
  });
});

describe('version directories at start-up after a crash (the store)', () => {
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

  it('gives a version no directory while it is verified, and none at all when it fails', async () => {
    const relay = await inProcessRelay(tmp.dir, { keepVersions: 5, spareSegments: 0, chunkSize: '64KiB', pin: false });
    const client = await RelayClient.connect({ socketPath: relay.options.socketPath, reconnect: false });
    for (const v of [1, 2, 3]) await publishVisible(client, { model: 'm', version: v, tensors: weights(v) });
    client.close();
    await relay.close();
    segments = relay.store.options.shmDir; // the relay's huge-page mount, where it made one
    unlinkSync(join(segments, 'clean-shutdown.json')); // as a crash leaves it
    expect(versionDirs(segments).map((d) => d.version)).toEqual([1, 2, 3]);
    // v1's bytes go bad while no relay runs.
    const v1 = join(segments, 'm.v1.safetensors');
    const fd = openSync(v1, 'r+');
    writeSync(fd, Buffer.from([0xee]), 0, 1, statSync(v1).size - 5);
    closeSync(fd);

    const registry = new Registry();
    const options = parseRelayOptions({ shmDir: segments, keepVersions: 5, spareSegments: 0, pin: false });
    const store = new VersionStore({ ...options, pages: SMALL_PAGES, logger: silentLogger, metrics: new RelayMetrics(registry, () => null) });
    stores.push(store);
    expect(await store.init()).toEqual({ recovered: 1, discarded: 0, verifying: 2 });
    // The newest is served, with its directory; the older two are being verified: none.
    expect(store.verifyingVersions().map((v) => v.version)).toEqual([2, 1]);
    expect(versionDirs(segments).map((d) => d.version)).toEqual([3]);
    expect(store.latest('m')!.dir).toBe(join(segments, 'models', 'm', 'v3'));
    await store.recovered();
    // v2 passed and has its directory again; v1 failed and has none.
    expect(store.list().map((v) => [v.version, v.dir])).toEqual([
      [2, join(segments, 'models', 'm', 'v2')],
      [3, join(segments, 'models', 'm', 'v3')],
    ]);
    expect(versionDirs(segments).map((d) => d.version)).toEqual([2, 3]);
    expect(existsSync(v1)).toBe(false);
    expect(lstatSync(join(segments, 'models', 'm', 'v2', 'model.safetensors')).ino).toBe(statSync(join(segments, 'm.v2.safetensors')).ino);
    checkDirsTruthful(segments);
  });
});
