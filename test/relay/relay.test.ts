import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Relay } from '../../src/relay/daemon.js';
import { checksumBuffer, checksumHex } from '../../src/native/index.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { inProcessRelay, metricValue, metricsText, publishVisible, tempShmDir } from '../helpers/relay.js';

const MODEL = 'org/tiny';

function tensors(seed: number): { name: string; dtype: 'F32' | 'I32'; shape: number[]; data: Float32Array | Int32Array }[] {
  return [
    { name: 'embed', dtype: 'F32', shape: [64, 32], data: Float32Array.from({ length: 64 * 32 }, (_, i) => i * seed) },
    { name: 'layer.0.w', dtype: 'F32', shape: [32, 32], data: Float32Array.from({ length: 1024 }, (_, i) => -i - seed) },
    { name: 'steps', dtype: 'I32', shape: [1], data: Int32Array.of(seed) },
  ];
}

describe('relay: local publish and acquire', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let relay: Relay;
  let client: RelayClient;

  beforeEach(async () => {
    tmp = tempShmDir();
    relay = await inProcessRelay(tmp.dir, { keepVersions: 1, chunkSize: 4096 });
    client = await RelayClient.connect({ socketPath: relay.options.socketPath });
  });
  afterEach(async () => {
    client.close();
    await relay.close();
    tmp.cleanup();
  });

  it('publishes a version and serves zero-copy views of it', async () => {
    const desc = await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    expect(desc.checksums?.length).toBe(Math.ceil((desc.size - desc.dataOffset) / 4096));
    await using lease = await client.acquire({ model: MODEL });
    expect(lease.version).toBe(1);
    expect(Array.from(lease.tensor('embed') as Float32Array).slice(0, 3)).toEqual([0, 1, 2]);
    expect((lease.tensor('steps') as Int32Array)[0]).toBe(1);
    await lease.verify();
    const status = await client.status();
    expect(status.versions).toMatchObject([{ model: MODEL, version: 1, state: 'complete', leases: 1 }]);
  });

  it("release detaches the lease's views at once and resolves once the segment is unmapped (off the event loop)", async () => {
    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    // The relay runs in this process and maps the segment too: count the mappings of the file,
    // once the writer's and the relay's writable ones (unmapped on the pool) are gone.
    const path = (await client.status()).versions[0]!.path;
    const mappings = (): number =>
      readFileSync('/proc/self/maps', 'utf8')
        .split('\n')
        .filter((l) => l.endsWith(path)).length;
    await vi.waitFor(() => expect(mappings()).toBe(1));
    const before = mappings();
    const lease = await client.acquire({ model: MODEL });
    const view = lease.tensor('embed') as Float32Array;
    expect(view.length).toBe(64 * 32);
    expect(mappings()).toBe(before + 1);
    const released = lease.release();
    expect(view.length).toBe(0);
    await released;
    expect(mappings()).toBe(before);
  });

  it('acquires latest, exact and at-least versions, and waits for one to arrive', async () => {
    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    await publishVisible(client, { model: MODEL, version: 2, tensors: tensors(2) });
    const latest = await client.acquire({ model: MODEL });
    expect(latest.version).toBe(2);
    const exact = await client.acquire({ model: MODEL, version: 1 });
    expect(exact.version).toBe(1);
    await expect(client.acquire({ model: MODEL, atLeast: 3 })).rejects.toMatchObject({ code: 'ERR_UNKNOWN_VERSION' });
    await expect(client.acquire({ model: 'org/other' })).rejects.toMatchObject({ code: 'ERR_UNKNOWN_MODEL' });
    await expect(client.acquire({ model: MODEL, atLeast: 3, timeoutMs: 50 })).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    const waiting = client.acquire({ model: MODEL, atLeast: 3, timeoutMs: 10_000 });
    // The relay has the acquire waiting before version 3 is published: the case under test is a
    // reader that waits for a version, not one that finds it there.
    const waitingNow = async (): Promise<number> => metricValue(await metricsText(relay.metricsPort!), 'laminar_relay_acquires_waiting');
    await vi.waitFor(async () => expect(await waitingNow()).toBe(1), { timeout: 10_000 });
    await publishVisible(client, { model: MODEL, version: 3, tensors: tensors(3) });
    const arrived = await waiting;
    expect(arrived.version).toBe(3);
    expect((arrived.tensor('steps') as Int32Array)[0]).toBe(3);
    expect(await waitingNow()).toBe(0);
    await Promise.all([latest.release(), exact.release(), arrived.release()]);
  });

  it('streams version events to watchers', async () => {
    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    const aborter = new AbortController();
    const seen: number[] = [];
    const watching = (async () => {
      for await (const ev of client.watch({ model: MODEL, replay: true, signal: aborter.signal })) {
        seen.push(ev.version);
        if (seen.length === 3) aborter.abort();
      }
    })();
    const other = await RelayClient.connect({ socketPath: relay.options.socketPath });
    await publishVisible(other, { model: 'org/ignored', version: 9, tensors: tensors(9) });
    await publishVisible(other, { model: MODEL, version: 2, tensors: tensors(2) });
    await publishVisible(other, { model: MODEL, version: 3, tensors: tensors(3) });
    await watching;
    expect(seen).toEqual([1, 2, 3]);
    other.close();
  });

  it('ends every watch of a client when its connection closes', async () => {
    const other = await RelayClient.connect({ socketPath: relay.options.socketPath });
    const seen: number[][] = [[], []];
    const ended = seen.map(async (mine) => {
      // With replay, version 1 reaches a watch whether it subscribed before the publish or after.
      for await (const ev of other.watch({ model: MODEL, replay: true })) mine.push(ev.version);
      return mine;
    });
    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    await vi.waitFor(() => expect(seen).toEqual([[1], [1]]), { timeout: 10_000 });
    other.close();
    expect(await Promise.all(ended)).toEqual([[1], [1]]);
  });

  it('keeps latest + keep-versions + leased versions and retires the rest', async () => {
    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    const held = await client.acquire({ model: MODEL, version: 1 });
    for (const v of [2, 3, 4]) await publishVisible(client, { model: MODEL, version: v, tensors: tensors(v) });
    const versions = (await client.status()).versions.map((v) => v.version);
    expect(versions).toEqual([1, 3, 4]); // 1 leased, 4 latest, 3 kept (keepVersions = 1)
    expect((held.tensor('steps') as Int32Array)[0]).toBe(1); // still readable
    await held.release();
    // Retired once its lease is gone.
    await vi.waitFor(async () => expect((await client.status()).versions.map((v) => v.version)).toEqual([3, 4]), { timeout: 10_000 });
    // The version leaves the table at once; its file is renamed to a spare or unlinked after
    // (retire awaits the directory's removal first), so the file check waits on that too.
    const segments = () =>
      readdirSync(relay.store.options.shmDir)
        .filter((f) => f.endsWith('.safetensors'))
        .sort();
    await vi.waitFor(() => expect(segments()).toEqual(['org~2ftiny.v3.safetensors', 'org~2ftiny.v4.safetensors']), { timeout: 10_000 });
  });

  it('lets several writers fill disjoint tensors of one publication', async () => {
    const specs = tensors(5);
    const pub = await client.beginPublish({ model: MODEL, version: 5, tensors: specs.map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    const ranks = await Promise.all([1, 2].map(() => RelayClient.connect({ socketPath: relay.options.socketPath })));
    const parts = await Promise.all(ranks.map((r) => r.attach(pub.segment)));
    parts[0]!.write('embed', specs[0]!.data);
    parts[1]!.write('layer.0.w', specs[1]!.data);
    await Promise.all(parts.map((p) => p.close()));
    await expect(parts[0]!.commit()).rejects.toMatchObject({ code: 'ERR_NOT_OWNER' });
    // The relay refuses a commit with a tensor missing and keeps the version writing (the
    // client's commit() would abort it: asked over the protocol directly here).
    await expect(client.request('commit', { model: MODEL, version: 5 })).rejects.toMatchObject({ code: 'ERR_INCOMPLETE', details: { missing: ['steps'] } });
    pub.write('steps', specs[2]!.data);
    await (
      await pub.commit()
    ).visible;
    const lease = await client.acquire({ model: MODEL, version: 5 });
    expect((lease.tensor('layer.0.w') as Float32Array)[1]).toBe(-6);
    await lease.release();
    ranks.forEach((r) => r.close());
  });

  it('refuses a commit whose bytes changed after they were written, serves nothing, and keeps the version for its writer to mend', async () => {
    const specs = tensors(6);
    const pub = await client.beginPublish({ model: MODEL, version: 6, tensors: specs.map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    for (const t of specs) pub.write(t.name, t.data);
    await pub.flush();
    pub.bytes('embed')[100]! ^= 0xff; // a stray write after the checksum was taken
    // Over the protocol (the client's commit() aborts a refused version: see publish-visibility.test.ts).
    await expect(client.request('commit', { model: MODEL, version: 6 })).rejects.toMatchObject({
      code: 'ERR_CHECKSUM_MISMATCH',
      details: { mismatched: ['embed'] },
    });
    await expect(client.acquire({ model: MODEL })).rejects.toMatchObject({ code: 'ERR_UNKNOWN_VERSION' });
    // The writer can repair the tensor and commit again.
    pub.write('embed', specs[0]!.data);
    await (
      await pub.commit()
    ).visible;
    expect((await client.acquire({ model: MODEL })).version).toBe(6);
  });

  it('writes big tensors on the thread pool with per-chunk checksums, and catches a changed piece', async () => {
    const piece = 16 * 1024 * 1024;
    const big = new Uint8Array(2 * piece + 12345).map((_, i) => i % 251);
    const pub = await client.beginPublish({
      model: MODEL,
      version: 8,
      tensors: [
        { name: 'big', dtype: 'U8', shape: [big.length] },
        { name: 'empty', dtype: 'F32', shape: [0] },
      ],
    });
    await Promise.all([pub.writeAsync('big', big), pub.writeAsync('empty', new Float32Array(0))]);
    await pub.flush();
    pub.bytes('big')[piece + 7]! ^= 1; // lands in the second piece
    await expect(client.request('commit', { model: MODEL, version: 8 })).rejects.toMatchObject({
      code: 'ERR_CHECKSUM_MISMATCH',
      details: { mismatched: ['big'] },
    });
    await pub.writeAsync('big', big);
    await (
      await pub.commit()
    ).visible;
    const lease = await client.acquire({ model: MODEL, version: 8 });
    expect(Buffer.from(lease.bytes('big')).equals(Buffer.from(big))).toBe(true);
    await lease.release();
    // A report with the wrong number of pieces is refused, in either form.
    const v9 = await client.beginPublish({ model: MODEL, version: 9, tensors: [{ name: 'big', dtype: 'U8', shape: [big.length] }] });
    for (const report of [
      { pieceSize: piece, pieces: ['0'.repeat(16)] },
      { chunkAligned: true, pieces: ['0'.repeat(16)] },
      { chunkAligned: true, pieceSize: piece, pieces: ['0'.repeat(16), '0'.repeat(16), '0'.repeat(16)] },
      { pieces: ['0'.repeat(16)] },
    ]) {
      await expect(client.request('written', { model: MODEL, version: 9, tensors: [{ name: 'big', ...report }] })).rejects.toMatchObject({
        code: 'ERR_BAD_REQUEST',
      });
    }
    // A writer of its own (raw protocol) may checksum per pieceSize bytes: pieces that straddle
    // chunks are read on their own at commit, and a wrong one is caught.
    v9.bytes('big').set(big);
    const sums = [0, 1, 2].map((i) => checksumHex(checksumBuffer(big.subarray(i * piece, (i + 1) * piece))));
    const report = (pieces: string[]): Promise<unknown> =>
      client.request('written', { model: MODEL, version: 9, tensors: [{ name: 'big', pieceSize: piece, pieces }] });
    await report([sums[0]!, sums[2]!, sums[1]!]);
    await expect(client.request('commit', { model: MODEL, version: 9 })).rejects.toMatchObject({
      code: 'ERR_CHECKSUM_MISMATCH',
      details: { mismatched: ['big'] },
    });
    await report(sums);
    await (
      await v9.commit()
    ).visible;
    const lease9 = await client.acquire({ model: MODEL, version: 9 });
    await lease9.verify();
    await lease9.release();
  });

  it('gives one of two racing publishers the version and the other a conflict', async () => {
    const other = await RelayClient.connect({ socketPath: relay.options.socketPath });
    const spec = tensors(7).map(({ name, dtype, shape }) => ({ name, dtype, shape }));
    const results = await Promise.allSettled([
      client.beginPublish({ model: MODEL, version: 7, tensors: spec }),
      other.beginPublish({ model: MODEL, version: 7, tensors: spec }),
    ]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const loser = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(loser.reason).toMatchObject({ code: 'ERR_VERSION_EXISTS' });
    await expect(client.publish({ model: MODEL, version: 7, tensors: tensors(7) })).rejects.toMatchObject({ code: 'ERR_VERSION_EXISTS' });
    other.close();
  });

  it('discards a publication whose publisher disconnects, and releases leases of dead clients', async () => {
    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    const doomed = await RelayClient.connect({ socketPath: relay.options.socketPath });
    const pub = await doomed.beginPublish({ model: MODEL, version: 2, tensors: tensors(2).map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    pub.write('embed', tensors(2)[0]!.data);
    await doomed.acquire({ model: MODEL, version: 1 });
    expect((await client.status()).leases).toBe(1);
    doomed.close();
    // The relay sees the connection go: its lease and its publication go with it.
    await vi.waitFor(async () => expect(await client.status()).toMatchObject({ leases: 0, versions: [{ version: 1 }] }), { timeout: 10_000 });
    const status = await client.status();
    expect(status.versions.map((v) => v.version)).toEqual([1]);
    expect(existsSync(pub.description.path)).toBe(false);
  });

  it('refuses a publish that cannot fit the memory budget without freeing latest or leased versions', async () => {
    await relay.close();
    relay = await inProcessRelay(tmp.dir, { memoryBudget: 64 * 1024, keepVersions: 5 });
    client.close();
    client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    const big = (v: number) => [{ name: 'w', dtype: 'U8' as const, shape: [20_000], data: new Uint8Array(20_000).fill(v) }];
    await publishVisible(client, { model: MODEL, version: 1, tensors: big(1) });
    await publishVisible(client, { model: MODEL, version: 2, tensors: big(2) });
    const lease = await client.acquire({ model: MODEL, version: 1 });
    // 3 x 24 KiB > 64 KiB: v1 is leased and v2 is latest, so nothing can be freed.
    const err = await publishVisible(client, { model: MODEL, version: 3, tensors: big(3) }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_MEMORY_BUDGET' });
    expect((err as Error).message).toContain('64.0 KiB');
    await lease.release();
    // Now v1 may go: the publish fits.
    await publishVisible(client, { model: MODEL, version: 3, tensors: big(3) });
    expect((await client.status()).versions.map((v) => v.version)).toEqual([2, 3]);
    const text = await metricsText(relay.metricsPort!);
    expect(metricValue(text, 'laminar_relay_errors_total', 'code="ERR_MEMORY_BUDGET"')).toBe(1);
  });

  it('adopts a checkpoint directory of shards as a version', async () => {
    // Two shards written by the relay itself, then read back as a checkpoint directory.
    await publishVisible(client, { model: 'ckpt/a', version: 1, tensors: tensors(1).slice(0, 2) });
    await publishVisible(client, { model: 'ckpt/b', version: 1, tensors: tensors(1).slice(2) });
    const { mkdtempSync, copyFileSync } = await import('node:fs');
    const dir = mkdtempSync(`${tmp.dir}/ckpt-`);
    copyFileSync(`${relay.store.options.shmDir}/ckpt~2fa.v1.safetensors`, `${dir}/model-00001-of-00002.safetensors`);
    copyFileSync(`${relay.store.options.shmDir}/ckpt~2fb.v1.safetensors`, `${dir}/model-00002-of-00002.safetensors`);
    const progress: number[] = [];
    const desc = await client.publishFile(dir, { model: MODEL, version: 10, onProgress: (done) => progress.push(done) });
    expect(desc.tensors.map((t) => t.name)).toEqual(['embed', 'layer.0.w', 'steps']);
    expect(progress.at(-1)).toBe(desc.size - desc.dataOffset);
    const lease = await client.acquire({ model: MODEL, version: 10 });
    expect(Array.from(lease.tensor('layer.0.w') as Float32Array).slice(0, 2)).toEqual([-1, -2]);
    expect((lease.tensor('steps') as Int32Array)[0]).toBe(1);
    await lease.verify();
    await lease.release();
    await expect(client.publishFile(`${dir}/missing`, { model: MODEL, version: 11 })).rejects.toMatchObject({ code: 'ERR_BAD_SAFETENSORS' });
  });
});
