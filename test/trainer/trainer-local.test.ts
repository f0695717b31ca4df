/**
 * TrainerClient on the master's host: writes into the master's shared memory, prepares the next
 * version's segment while the trainer trains, uses it when the next publish fits it and throws
 * it away when it does not, and leaves no half-written segment behind when closed.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { freePort } from '../../src/services/index.js';
import { Manager } from '../../src/manager/manager.js';
import { TrainerClient } from '../../src/trainer/trainer-client.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { inProcessRelay, tempShmDir } from '../helpers/relay.js';
import { natsFixture } from '../data/helpers.js';

const SECRET = 'trainer-local-test-secret-0123456789';
const nats = natsFixture();

function tensors(version: number, rows = 1024): { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] {
  return [
    { name: 'a', dtype: 'F32', shape: [rows, 64], data: new Float32Array(rows * 64).fill(version) },
    { name: 'b', dtype: 'F32', shape: [16], data: new Float32Array(16).fill(-version) },
  ];
}

describe('TrainerClient, local mode', () => {
  it("publishes into the master's shared memory and prepares the next version's segment", async () => {
    const shm = tempShmDir();
    const manager = new Manager({ nc: nats.nc, job: 'tl', registry: new Registry(), leaseMs: 1000, tickMs: 50 });
    await manager.start();
    await manager.whenLeader();
    const port = await freePort();
    const relay: Relay = await inProcessRelay(shm.dir, {
      nats: nats.server.url,
      job: 'tl',
      host: 'hostA',
      listen: `127.0.0.1:${port}`,
      secret: SECRET,
      heartbeat: '200ms',
    });
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
      expect(await held(1)).toEqual([1, -1]);
      // The next version's segment is begun at once, while the trainer "trains".
      await expect.poll(states, { timeout: 5000 }).toContain('v2:writing');
      const second = await trainer.publish({ model: 'm', version: 2, tensors: tensors(2) });
      expect(second.mode).toBe('local');
      expect(await held(2)).toEqual([2, -2]);
      // A version that does not fit what was prepared (another layout): the prepared one goes.
      await expect.poll(states, { timeout: 5000 }).toContain('v3:writing');
      await trainer.publish({ model: 'm', version: 4, tensors: tensors(4, 512) });
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
});
