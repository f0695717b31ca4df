import { chmodSync, openSync, readdirSync, writeSync, closeSync, existsSync, statSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { REPO, metricValue, metricsText, spawnRelay, publishVisible, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const weights = (v: number) => [
  { name: 'a', dtype: 'F32' as const, shape: [4096], data: Float32Array.from({ length: 4096 }, (_, i) => i + v) },
  { name: 'b', dtype: 'U8' as const, shape: [10000], data: new Uint8Array(10000).fill(v) },
];

/** The relay's status once the versions it found at start-up are all verified. */
async function verified(client: RelayClient): Promise<Awaited<ReturnType<RelayClient['status']>>> {
  for (;;) {
    const status = await client.status();
    if (status.verifying.length === 0) return status;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('relay process: crashes and restarts', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let relays: RelayProcess[] = [];
  beforeEach(() => {
    tmp = tempShmDir();
    relays = [];
  });
  afterEach(async () => {
    await Promise.all(relays.map((r) => r.stop('SIGKILL')));
    tmp.cleanup();
  });

  it('after SIGKILL, re-adopts verified complete versions and deletes partial and corrupt ones', async () => {
    const first = await spawnRelay(tmp.dir, ['--keep-versions', '5', '--chunk-size', '16KiB']);
    relays.push(first);
    const client = await RelayClient.connect({ socketPath: first.socketPath });
    for (const v of [1, 2]) await publishVisible(client, { model: 'm', version: v, tensors: weights(v) });
    const partial = await client.beginPublish({ model: 'm', version: 3, tensors: weights(3).map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    partial.write('a', weights(3)[0]!.data);
    await partial.flush();
    expect(first.child.kill('SIGKILL')).toBe(true);
    expect(await first.exited).toBe('SIGKILL');
    client.close();

    // Corrupt one byte of v1's data on "disk" while no relay runs.
    const v1 = join(first.shmDir, 'm.v1.safetensors');
    const fd = openSync(v1, 'r+');
    writeSync(fd, Buffer.from([0xee]), 0, 1, statSync(v1).size - 5);
    closeSync(fd);
    expect(readdirSync(first.shmDir).some((f) => f.endsWith('.writing'))).toBe(true);

    const second = await spawnRelay(tmp.dir, ['--keep-versions', '5']);
    relays.push(second);
    const again = await RelayClient.connect({ socketPath: second.socketPath });
    const status = await verified(again); // v1 is older: verified after the relay started
    expect(status.versions.map((v) => [v.version, v.state])).toEqual([[2, 'complete']]);
    expect(existsSync(v1)).toBe(false);
    expect(readdirSync(second.shmDir).some((f) => f.endsWith('.writing'))).toBe(false);
    const lease = await again.acquire({ model: 'm' });
    expect((lease.tensor('a') as Float32Array)[10]).toBe(12);
    await lease.verify();
    await lease.release();
    const text = await metricsText(second.metricsPort);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="adopted"')).toBe(1);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="corrupt_deleted"')).toBe(1);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="partial_deleted"')).toBe(1);
    again.close();
  });

  it('stops cleanly on SIGTERM, keeping complete versions and dropping partial ones', async () => {
    const relay = await spawnRelay(tmp.dir);
    relays.push(relay);
    const client = await RelayClient.connect({ socketPath: relay.socketPath });
    await publishVisible(client, { model: 'm', version: 1, tensors: weights(1) });
    await client.beginPublish({ model: 'm', version: 2, tensors: weights(2).map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    expect(await relay.stop('SIGTERM')).toBe(0);
    client.close();
    const files = readdirSync(relay.shmDir).sort();
    expect(files).toEqual(['clean-shutdown.json', 'm.v1.safetensors', 'models']);
    // v1's version directory stays with it; the discarded v2 never had one.
    expect(readdirSync(join(relay.shmDir, 'models', 'm'))).toEqual(['v1']);
    expect(existsSync(relay.socketPath)).toBe(false);
  });

  it('after a clean stop, adopts the versions left untouched without reading them, and verifies any other', async () => {
    const args = ['--keep-versions', '5', '--chunk-size', '16KiB'];
    const first = await spawnRelay(tmp.dir, args);
    relays.push(first);
    const client = await RelayClient.connect({ socketPath: first.socketPath, reconnect: false });
    for (const v of [1, 2]) await publishVisible(client, { model: 'm', version: v, tensors: weights(v) });
    client.close();
    expect(await first.stop('SIGTERM')).toBe(0);
    const record = join(first.shmDir, 'clean-shutdown.json');
    expect(existsSync(record)).toBe(true);

    // While no relay runs, v1's bytes change (its file must be made writable first).
    const v1 = join(first.shmDir, 'm.v1.safetensors');
    chmodSync(v1, 0o640);
    const fd = openSync(v1, 'r+');
    writeSync(fd, Buffer.from([0xee]), 0, 1, statSync(v1).size - 5);
    closeSync(fd);

    const second = await spawnRelay(tmp.dir, args);
    relays.push(second);
    expect(existsSync(record)).toBe(false); // taken at start: a crash from here on leaves none
    const again = await RelayClient.connect({ socketPath: second.socketPath, reconnect: false });
    await verified(again); // v1 changed: verified (and found corrupt) after the relay started
    let text = await metricsText(second.metricsPort);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="adopted_clean"')).toBe(1);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="corrupt_deleted"')).toBe(1);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="adopted"')).toBe(0);
    expect(second.logs.some((l) => l.includes('unchanged since a clean stop'))).toBe(true);
    expect((await again.status()).versions.map((v) => v.version)).toEqual([2]);
    const lease = await again.acquire({ model: 'm' });
    await lease.verify();
    await lease.release();
    again.close();

    // A crash leaves no record: the next start reads every version again.
    second.child.kill('SIGKILL');
    await second.exited;
    const third = await spawnRelay(tmp.dir, args);
    relays.push(third);
    text = await metricsText(third.metricsPort);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="adopted"')).toBe(1);
    expect(metricValue(text, 'laminar_relay_recovered_versions_total', 'result="adopted_clean"')).toBe(0);
  });

  it('refuses to run two relays on one shm directory', async () => {
    const relay = await spawnRelay(tmp.dir);
    relays.push(relay);
    await expect(spawnRelay(tmp.dir)).rejects.toThrow(/ERR_(SHM_DIR|SOCKET)_IN_USE/);
  });

  it('discards the publication of a writer process killed mid-write, and the lease of a reader killed mid-read', async () => {
    const relay = await spawnRelay(tmp.dir);
    relays.push(relay);
    const client = await RelayClient.connect({ socketPath: relay.socketPath });
    await publishVisible(client, { model: 'm', version: 1, tensors: weights(1) });
    const script = `
      import { RelayClient } from ${JSON.stringify(join(REPO, 'dist/src/relay/client/relay-client.js'))};
      const c = await RelayClient.connect({ socketPath: ${JSON.stringify(relay.socketPath)} });
      await c.acquire({ model: 'm', version: 1 });
      const p = await c.beginPublish({ model: 'm', version: 2, tensors: [{ name: 'a', dtype: 'F32', shape: [1024] }] });
      p.bytes('a').fill(1);
      process.stdout.write('ready\\n');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    const status = await client.status();
    expect(status.leases).toBe(1);
    expect(status.versions.map((v) => v.state)).toEqual(['complete', 'writing']);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    // The relay sees the dead client's connection close: its lease and its publication go.
    await vi.waitFor(async () => expect(await client.status()).toMatchObject({ leases: 0, versions: [{ version: 1 }] }), { timeout: 10_000 });
    // Its file is unlinked after the version left the table (store.ts, discard): a moment later
    // on a loaded machine.
    await vi.waitFor(() => expect(readdirSync(relay.shmDir).filter((f) => f.includes('.v2.'))).toEqual([]), { timeout: 10_000 });
    client.close();
  });

  it('keeps working unpinned when the memlock limit refuses, and says so once', async () => {
    const relay = await spawnRelay(tmp.dir, [], ['setpriv', '--bounding-set', '-ipc_lock', 'prlimit', '--memlock=0:0']);
    relays.push(relay);
    const client = await RelayClient.connect({ socketPath: relay.socketPath });
    for (const v of [1, 2, 3]) await publishVisible(client, { model: 'm', version: v, tensors: weights(v) });
    const lease = await client.acquire({ model: 'm' });
    expect((lease.tensor('b') as Uint8Array)[0]).toBe(3);
    await lease.release();
    const status = await client.status();
    expect(status.pinning).toBe(false);
    expect(status.versions.every((v) => !v.pinned)).toBe(true);
    const text = await metricsText(relay.metricsPort);
    expect(metricValue(text, 'laminar_relay_pinned')).toBe(0);
    expect(metricValue(text, 'laminar_relay_pin_failures_total')).toBe(1);
    expect(relay.logs.filter((l) => l.includes('mlock refused'))).toHaveLength(1);
    client.close();
  });

  it('restricts the socket and the segments to the job user and group', async () => {
    const relay = await spawnRelay(tmp.dir, ['--socket-mode', '660', '--file-mode', '640']);
    relays.push(relay);
    const client = await RelayClient.connect({ socketPath: relay.socketPath });
    await publishVisible(client, { model: 'm', version: 1, tensors: weights(1) });
    expect(statSync(relay.socketPath).mode & 0o777).toBe(0o660);
    expect(statSync(relay.shmDir).mode & 0o777).toBe(0o750);
    expect(statSync(join(relay.shmDir, 'm.v1.safetensors')).mode & 0o777).toBe(0o440);
    client.close();
  });
});
