/**
 * Version directories (`<shm-dir>/models/<model>/v<N>/`) on in-process relays: made when a
 * version completes (by commit, adoption or broadcast), a hard link to the segment plus the
 * engine files' symlinks, kept while leased, removed before the file is recycled as a spare.
 */
import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Relay } from '../../src/relay/daemon.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { RelayOptionsInput } from '../../src/relay/options.js';
import { SECRET } from '../helpers/broadcast.js';
import { writeCheckpoint } from '../helpers/checkpoint.js';
import { inProcessRelay, loopbackChain, metricValue, publishVisible, tempShmDir, until } from '../helpers/relay.js';
import { LINKED_ENGINE_FILES, checkDirsTruthful, engineFilesDir, hasModelsDir, readSafetensors, versionDirs } from '../helpers/version-dirs.js';

process.env.UCX_TLS ??= 'tcp';

const MODEL = 'org/dirs';
const MODEL_DIR = 'org~2fdirs';

/** Two F32 tensors whose values derive from the version (stale bytes would show). */
function weights(version: number, floats = 64 * 1024): { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] {
  return [
    { name: 'layer.weight', dtype: 'F32', shape: [floats / 64, 64], data: Float32Array.from({ length: floats }, (_, i) => version * 1000 + (i % 997)) },
    { name: 'layer.bias', dtype: 'F32', shape: [64], data: Float32Array.from({ length: 64 }, (_, i) => -version - i) },
  ];
}

function bytesOf(a: Float32Array): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

describe('relay: version directories', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function start(options: RelayOptionsInput = {}): Promise<{ relay: Relay; client: RelayClient; dir: string }> {
    const tmp = tempShmDir();
    cleanups.push(() => tmp.cleanup());
    const relay = await inProcessRelay(tmp.dir, { pin: false, chunkSize: '64KiB', ...options });
    cleanups.push(() => relay.close());
    const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    cleanups.push(() => client.close());
    return { relay, client, dir: relay.store.options.shmDir };
  }

  const dirGauge = async (relay: Relay): Promise<number> => metricValue(await relay.registry.metrics(), 'laminar_relay_version_dirs');

  it('appears when the version completes: a hard link to the segment, a valid safetensors file, and the engine files', async () => {
    const engine = engineFilesDir();
    cleanups.push(() => engine.cleanup());
    const { relay, client, dir } = await start({ engineFiles: engine.dir });
    const expected = join(dir, 'models', MODEL_DIR, 'v1');

    const pub = await client.beginPublish({ model: MODEL, version: 1, tensors: weights(1).map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    expect(pub.description.dir).toBeNull();
    for (const t of weights(1)) pub.write(t.name, t.data);
    await pub.flush();
    // Written but not committed: no directory, nothing exposes the segment.
    expect(existsSync(expected)).toBe(false);
    expect(statSync(pub.description.path).nlink).toBe(1);
    const committed = await (await pub.commit()).visible;
    expect(committed.dir).toBe(expected);

    const weightsFile = join(expected, 'model.safetensors');
    const segment = statSync(committed.path);
    expect(lstatSync(weightsFile).isFile()).toBe(true);
    expect(lstatSync(weightsFile).ino).toBe(segment.ino);
    expect(segment.nlink).toBe(2);
    const parsed = readSafetensors(weightsFile);
    expect(parsed.metadata).toMatchObject({ 'laminar.model': MODEL, 'laminar.version': '1' });
    for (const t of weights(1)) {
      expect(parsed.tensors.get(t.name)).toMatchObject({ dtype: 'F32', shape: t.shape });
      expect(parsed.tensors.get(t.name)!.bytes.equals(bytesOf(t.data))).toBe(true);
    }

    // The engine files: symlinks into the engine directory, nothing else (no other weights, no index).
    expect(readdirSync(expected).sort()).toEqual([...LINKED_ENGINE_FILES, 'model.safetensors'].sort());
    for (const name of LINKED_ENGINE_FILES) {
      expect(lstatSync(join(expected, name)).isSymbolicLink()).toBe(true);
      expect(readlinkSync(join(expected, name))).toBe(join(engine.dir, name));
      expect(readFileSync(join(expected, name), 'utf8')).toBe(readFileSync(join(engine.dir, name), 'utf8'));
    }

    await using lease = await client.acquire({ model: MODEL });
    expect(lease.dir).toBe(expected);
    expect(lease.description.dir).toBe(expected);
    expect((await client.status()).versions.map((v) => [v.version, v.dir])).toEqual([[1, expected]]);
    expect(await dirGauge(relay)).toBe(1);
  });

  it('goes when the version retires; a leased version keeps its directory until it is released', async () => {
    const { relay, client, dir } = await start({ keepVersions: 0, spareSegments: 0 });
    const v = (n: number): string => join(dir, 'models', MODEL_DIR, `v${n}`);
    await publishVisible(client, { model: MODEL, version: 1, tensors: weights(1) });
    const held = await client.acquire({ model: MODEL, version: 1 });
    await publishVisible(client, { model: MODEL, version: 2, tensors: weights(2) });
    await publishVisible(client, { model: MODEL, version: 3, tensors: weights(3) });
    await until('v2 retired', () => (existsSync(v(2)) ? undefined : true));
    // v1 is past retention but leased: it stays, and so does its directory, bytes intact.
    expect(existsSync(v(1))).toBe(true);
    expect(
      readSafetensors(join(v(1), 'model.safetensors'))
        .tensors.get('layer.bias')!
        .bytes.equals(bytesOf(weights(1)[1]!.data)),
    ).toBe(true);
    expect(versionDirs(dir).map((d) => d.version)).toEqual([1, 3]);
    expect(await dirGauge(relay)).toBe(2);
    await held.release();
    await until('v1 retired after its release', () => (existsSync(v(1)) ? undefined : true));
    expect(versionDirs(dir).map((d) => d.version)).toEqual([3]);
    expect(await dirGauge(relay)).toBe(1);
    checkDirsTruthful(dir);
  });

  it('removes the directory before a retired file is recycled as a spare: no directory ever shows another version', async () => {
    const { relay, client, dir } = await start({ keepVersions: 1, spareSegments: 1, spareQuiet: '100ms' });
    // Watch every file the store keeps as a spare, at the moment it keeps it: its link count
    // must be 1 by then (the version's directory already gone).
    const spares = (relay.store as unknown as { memory: { spares: { keep(path: string, size: number): Promise<boolean> } } }).memory.spares;
    const keep = spares.keep.bind(spares);
    const linksWhenKept: number[] = [];
    spares.keep = async (path, size) => {
      linksWhenKept.push(statSync(path).nlink);
      return keep(path, size);
    };
    const reused = async (): Promise<number> => metricValue(await relay.registry.metrics(), 'laminar_relay_spare_segments_total', 'event="reused"');
    relay.store.on('complete', () => checkDirsTruthful(dir));
    relay.store.on('retired', () => checkDirsTruthful(dir));
    for (let version = 1; version <= 8; version++) {
      const pub = await client.beginPublish({ model: MODEL, version, tensors: weights(version).map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
      // The file being written (often a recycled one) is linked from nowhere.
      expect(statSync(pub.description.path).nlink).toBe(1);
      checkDirsTruthful(dir);
      for (const t of weights(version)) pub.write(t.name, t.data);
      await (
        await pub.commit()
      ).visible;
      checkDirsTruthful(dir);
      // Before the next version begins: v(N-2) retired (a spare now, or unlinked with the pool
      // full of a prepared one), so that the next version takes a spare.
      const spareThere = (): boolean => readdirSync(dir).some((f) => f.endsWith('.segment.spare'));
      const retired = (n: number): boolean => n < 1 || !existsSync(join(dir, `${MODEL_DIR}.v${n}.safetensors`));
      await until(`v${version - 2} retired and a spare ready`, () => (spareThere() && retired(version - 2) ? true : undefined));
    }
    await until('v6 retired', () => (existsSync(join(dir, 'models', MODEL_DIR, 'v6')) ? undefined : true));
    checkDirsTruthful(dir);
    // v4..v8 each began with a spare there; v1..v6 retired through the pool.
    expect(await reused()).toBeGreaterThanOrEqual(5);
    expect(linksWhenKept).toHaveLength(6);
    expect(linksWhenKept).toEqual([1, 1, 1, 1, 1, 1]);
    expect(versionDirs(dir).map((d) => d.version)).toEqual([7, 8]);
    for (const version of [7, 8]) {
      const parsed = readSafetensors(join(dir, 'models', MODEL_DIR, `v${version}`, 'model.safetensors'));
      expect(parsed.tensors.get('layer.weight')!.bytes.equals(bytesOf(weights(version)[0]!.data))).toBe(true);
    }
  });

  it('gives an adopted checkpoint a directory', async () => {
    const { client, dir } = await start();
    const ckpt = join(dir, '..', 'ckpt.safetensors');
    const t = weights(5);
    writeCheckpoint(
      ckpt,
      t.map((x) => ({ name: x.name, dtype: x.dtype, shape: x.shape, data: new Uint8Array(x.data.buffer, x.data.byteOffset, x.data.byteLength) })),
    );
    const adopted = await client.publishFile(ckpt, { model: 'Qwen/Qwen2.5 0.5B', version: 5 });
    expect(adopted.dir).toBe(join(dir, 'models', 'Qwen~2fQwen2.5~200.5B', 'v5'));
    const parsed = readSafetensors(join(adopted.dir!, 'model.safetensors'));
    expect(parsed.tensors.get('layer.weight')!.bytes.equals(bytesOf(t[0]!.data))).toBe(true);
    expect(readdirSync(adopted.dir!)).toEqual(['model.safetensors']);
  });

  it('gives a version received over the broadcast a directory on every relay', async () => {
    const engine = engineFilesDir();
    cleanups.push(() => engine.cleanup());
    const common = { secret: SECRET, chunkSize: '64KiB', retryInterval: '200ms', peerTimeout: '5s', engineFiles: engine.dir };
    const started: Awaited<ReturnType<typeof start>>[] = [];
    await loopbackChain(2, async (i, listen) => {
      started.push(await start({ relayId: `d${i}`, listen, ...common }));
      return started[i]!.relay;
    });
    const [master, tail] = started as [(typeof started)[0], (typeof started)[0]];
    const arrived = new Promise<void>((resolve) => tail.relay.store.on('complete', (v) => v.version === 4 && resolve()));
    await publishVisible(master.client, { model: MODEL, version: 4, tensors: weights(4) });
    await arrived;
    const received = tail.relay.store.latest(MODEL)!;
    expect(received.dir).toBe(join(tail.dir, 'models', MODEL_DIR, 'v4'));
    expect(lstatSync(join(received.dir!, 'model.safetensors')).ino).toBe(statSync(received.path).ino);
    expect(readdirSync(received.dir!).sort()).toEqual([...LINKED_ENGINE_FILES, 'model.safetensors'].sort());
    await using lease = await tail.client.acquire({ model: MODEL, version: 4 });
    expect(lease.dir).toBe(received.dir);
    const parsed = readSafetensors(join(lease.dir!, 'model.safetensors'));
    expect(parsed.tensors.get('layer.weight')!.bytes.equals(bytesOf(weights(4)[0]!.data))).toBe(true);
  });

  it('is at <shm-dir>/models/<model>/v<N> whatever the page size, across restarts that change it', async () => {
    // The path users build by hand (SGLang's update_weights_from_disk takes one). By default the
    // relay mounts a huge-page tmpfs at <shm-dir>/huge and keeps the tree there; the documented
    // path must lead to it all the same, and still after restarts with and without the mount.
    const engine = engineFilesDir();
    cleanups.push(() => engine.cleanup());
    const tmp = tempShmDir();
    cleanups.push(() => tmp.cleanup());
    const shmDir = join(tmp.dir, 'segments');
    const documented = (v: number): string => join(shmDir, 'models', MODEL_DIR, `v${v}`);
    const run = async (version: number, hugePages: 'auto' | 'off'): Promise<void> => {
      const relay = await inProcessRelay(tmp.dir, { pin: false, chunkSize: '64KiB', engineFiles: engine.dir, hugePages });
      try {
        const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
        try {
          const done = await publishVisible(client, { model: MODEL, version, tensors: weights(version) });
          const weightsFile = join(documented(version), 'model.safetensors');
          expect(statSync(weightsFile).ino).toBe(statSync(done.path).ino);
          expect(readSafetensors(weightsFile).metadata['laminar.version']).toBe(String(version));
          expect(readFileSync(join(documented(version), 'config.json'), 'utf8')).toBe(readFileSync(join(engine.dir, 'config.json'), 'utf8'));
          // The directory the relay reports is the same directory.
          expect(statSync(done.dir!).ino).toBe(statSync(documented(version)).ino);
        } finally {
          client.close();
        }
      } finally {
        await relay.close();
      }
    };
    await run(1, 'auto');
    // The relay mounted (the suite runs as root), and the tree is on the mount: the documented
    // path is a link to it.
    expect(readlinkSync(join(shmDir, 'models'))).toBe(join('huge', 'models'));
    await run(2, 'off');
    // Segments moved into the shm dir: the tree is there, no link in its way.
    expect(lstatSync(join(shmDir, 'models')).isDirectory()).toBe(true);
    await run(3, 'auto');
    expect(readlinkSync(join(shmDir, 'models'))).toBe(join('huge', 'models'));
  });

  it('serves a version whose directory cannot be made, with dir null, and counts the error', async () => {
    const { relay, client, dir } = await start({ keepVersions: 0, spareSegments: 1 });
    // A file where the models/ tree goes: no directory can be made under it.
    writeFileSync(join(dir, 'models'), 'in the way');
    const done = await publishVisible(client, { model: MODEL, version: 1, tensors: weights(1) });
    expect(done.dir).toBeNull();
    await using lease = await client.acquire({ model: MODEL });
    expect(lease.dir).toBeNull();
    expect(Buffer.from(lease.bytes('layer.bias')).equals(bytesOf(weights(1)[1]!.data))).toBe(true);
    const text = await relay.registry.metrics();
    expect(metricValue(text, 'laminar_relay_version_dir_errors_total', 'op="create",code="ENOTDIR"')).toBe(1);
    expect(metricValue(text, 'laminar_relay_version_dirs')).toBe(0);
    expect(hasModelsDir(dir)).toBe(false);
  });
});
