/**
 * TrainerClient on the master's host: writes into the master's shared memory, prepares the next
 * version's segment while the trainer trains, uses it when the next publish fits it and throws
 * it away when it does not, and leaves no half-written segment behind when closed. publish()
 * returns once the bytes are in (the stall is the write); the master's verification follows, and
 * only a version it served is announced; one it refused rejects `visible` with the checksum
 * error and leaves the previous version served.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { openControlBucket } from '../../src/control/bucket.js';
import { decode, announceSchema } from '../../src/control/schema.js';
import { controlNames, Keys } from '../../src/control/subjects.js';
import type { StoredVersion, VersionStore } from '../../src/relay/store.js';
import { Manager } from '../../src/manager/manager.js';
import { TrainerClient } from '../../src/trainer/trainer-client.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { inProcessRelay, onFreePort, tempShmDir } from '../helpers/relay.js';
import { natsFixture } from '../data/helpers.js';

const SECRET = 'trainer-local-test-secret-0123456789';
const nats = natsFixture();

function tensors(version: number, rows = 1024): { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] {
  return [
    { name: 'a', dtype: 'F32', shape: [rows, 64], data: new Float32Array(rows * 64).fill(version) },
    { name: 'b', dtype: 'F32', shape: [16], data: new Float32Array(16).fill(-version) },
  ];
}

/**
 * Holds a step of the in-process relay's store for the versions `which` picks until release():
 * `commit` (before the relay reads the version) or `complete` (after it verified it, before it
 * serves it). `reached` resolves with the version held.
 */
function hold(
  store: VersionStore,
  step: 'commit' | 'complete',
  which: (v: StoredVersion) => boolean,
): { reached: Promise<StoredVersion>; release(): void; restore(): void } {
  const target = store as unknown as Record<typeof step, (v: StoredVersion, ...rest: unknown[]) => Promise<unknown>>;
  const original = target[step];
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let reach!: (v: StoredVersion) => void;
  const reached = new Promise<StoredVersion>((resolve) => (reach = resolve));
  target[step] = async function (this: unknown, v: StoredVersion, ...rest: unknown[]): Promise<unknown> {
    if (which(v)) {
      reach(v);
      await released;
    }
    return original.call(this, v, ...rest);
  };
  return { reached, release, restore: () => void (target[step] = original) };
}

describe('TrainerClient, local mode', () => {
  it("publishes into the master's shared memory and prepares the next version's segment", async () => {
    const shm = tempShmDir();
    const manager = new Manager({ nc: nats.nc, job: 'tl', registry: new Registry(), leaseMs: 1000, tickMs: 50 });
    await manager.start();
    await manager.whenLeader();
    const relay: Relay = await onFreePort((port) =>
      inProcessRelay(shm.dir, { nats: nats.server.url, job: 'tl', host: 'hostA', listen: `127.0.0.1:${port}`, secret: SECRET, heartbeat: '200ms' }),
    );
    const trainer = await TrainerClient.connect({ nats: { nc: nats.nc, job: 'tl' }, host: 'hostA', secret: SECRET, masterWaitMs: 10_000 });
    const reader = await RelayClient.connect({ socketPath: `${shm.dir}/relay.sock` });
    const held = async (version: number): Promise<number[]> => {
      const lease = await reader.acquire({ model: 'm', version });
      try {
        return [(lease.tensor('a') as Float32Array)[0]!, (lease.tensor('b') as Float32Array)[15]!];
      } finally {
        await lease.release();
      }
    };
    const states = async (): Promise<string[]> => (await reader.status()).versions.map((v) => `v${v.version}:${v.state}`);
    try {
      const first = await trainer.publish({ model: 'm', version: 1, tensors: tensors(1) });
      expect(first.mode).toBe('local');
      await first.visible;
      expect(await held(1)).toEqual([1, -1]);
      // The next version's segment is begun at once, while the trainer "trains".
      await expect.poll(states, { timeout: 5000 }).toContain('v2:writing');
      const second = await trainer.publish({ model: 'm', version: 2, tensors: tensors(2) });
      expect(second.mode).toBe('local');
      await second.visible;
      expect(await held(2)).toEqual([2, -2]);
      // A version that does not fit what was prepared (another layout): the prepared one goes.
      await expect.poll(states, { timeout: 5000 }).toContain('v3:writing');
      await (
        await trainer.publish({ model: 'm', version: 4, tensors: tensors(4, 512) })
      ).visible;
      expect(await held(4)).toEqual([4, -4]);
      expect(await states()).not.toContain('v3:writing');
      await trainer.close();
      // Closing throws the prepared segment away.
      await expect.poll(async () => (await states()).filter((s) => s.endsWith(':writing')), { timeout: 5000 }).toEqual([]);
    } finally {
      reader.close();
      await trainer.close();
      await relay.close();
      await manager.close();
      shm.cleanup();
    }
  }, 60_000);

  it('returns after the write, announces a version only once the master served it, and reports one it refused', async () => {
    const shm = tempShmDir();
    const manager = new Manager({ nc: nats.nc, job: 'tv', registry: new Registry(), leaseMs: 1000, tickMs: 50 });
    await manager.start();
    await manager.whenLeader();
    const relay: Relay = await onFreePort((port) =>
      inProcessRelay(shm.dir, { nats: nats.server.url, job: 'tv', host: 'hostA', listen: `127.0.0.1:${port}`, secret: SECRET, heartbeat: '200ms' }),
    );
    const trainer = await TrainerClient.connect({ nats: { nc: nats.nc, job: 'tv' }, host: 'hostA', secret: SECRET, masterWaitMs: 10_000 });
    const reader = await RelayClient.connect({ socketPath: `${shm.dir}/relay.sock` });
    const kv = await openControlBucket(nats.nc, controlNames('tv').bucket);
    const announced = async (): Promise<number | null> => {
      const entry = await kv.get(Keys.announce('m'));
      return entry?.operation === 'PUT' ? decode(announceSchema, entry.value, 'announcement').version : null;
    };
    try {
      // Version 1: held between verified and served. publish() has returned by then.
      const served = hold(relay.store, 'complete', (v) => v.version === 1);
      const first = await trainer.publish({ model: 'm', version: 1, tensors: tensors(1) });
      expect(first).toMatchObject({ mode: 'local', attempts: 1 });
      expect(first.stallSeconds).toBeGreaterThan(0);
      await served.reached;
      expect(await announced()).toBeNull();
      await expect(reader.acquire({ model: 'm' })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_VERSION });
      served.release();
      served.restore();
      const visible = await first.visible;
      expect(visible).toMatchObject({ model: 'm', version: 1, master: first.master });
      expect(visible.verifySeconds).toBeGreaterThan(0);
      expect(visible.visibleSeconds).toBeGreaterThanOrEqual(first.stallSeconds + visible.verifySeconds - 1e-6);
      // `visible` resolves once the announcement is made.
      expect(await announced()).toBe(1);

      // Version 2: a byte changes in the master's segment before its read. publish() returned;
      // `visible` rejects with the checksum code, the version is dropped, version 1 stays.
      const commit = hold(relay.store, 'commit', (v) => v.version === 2);
      const second = await trainer.publish({ model: 'm', version: 2, tensors: tensors(2) });
      expect(second.mode).toBe('local');
      const v2 = await commit.reached;
      new Uint8Array(v2.mapping!.view(v2.layout.dataOffset + 4096, 1))[0]! ^= 0xff;
      commit.release();
      commit.restore();
      await expect(second.visible).rejects.toMatchObject({ code: ErrorCodes.CHECKSUM_MISMATCH });
      const versions = (await reader.status()).versions.map((v) => `v${v.version}:${v.state}`);
      expect(versions).toContain('v1:complete');
      expect(versions.filter((v) => v.startsWith('v2:'))).toEqual([]);
      const lease = await reader.acquire({ model: 'm' });
      expect(lease.version).toBe(1);
      await lease.release();
      expect(await announced()).toBe(1);
      const text = await relay.registry.metrics();
      expect(text).toMatch(/laminar_relay_publishes_total\{result="rejected"\} 1/);

      // The trainer goes on: the next version is served and announced.
      const third = await trainer.publish({ model: 'm', version: 3, tensors: tensors(3) });
      await third.visible;
      expect(await announced()).toBe(3);
    } finally {
      reader.close();
      await trainer.close();
      await relay.close();
      await manager.close();
      shm.cleanup();
    }
  }, 60_000);
});
