/**
 * The trainer host's forwarding relay: a version published into it through the local protocol
 * (what the Python client does) reaches the chain's master and the rest of the chain; after the
 * master dies, the next version goes to the new master, and the publisher never sees an error.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { Manager } from '../../src/manager/manager.js';
import { parseControlOptions } from '../../src/control/nats-options.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { VersionForwarder, type ForwardRecord } from '../../src/relay/forwarding.js';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CLI, inProcessRelay, onFreePort, tempShmDir } from '../helpers/relay.js';
import { natsFixture } from '../data/helpers.js';

const SECRET = 'forwarder-test-secret-0123456789abcdef';
const JOB = 'fw';
const nats = natsFixture();

function tensors(version: number): { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] {
  return [
    { name: 'a', dtype: 'F32', shape: [256, 64], data: new Float32Array(256 * 64).fill(version) },
    { name: 'b', dtype: 'F32', shape: [8], data: new Float32Array(8).fill(-version) },
  ];
}

async function holds(relay: Relay, version: number): Promise<number[] | null> {
  const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
  try {
    const lease = await client.acquire({ model: 'm', version });
    try {
      return [(lease.tensor('a') as Float32Array)[100]!, (lease.tensor('b') as Float32Array)[7]!];
    } finally {
      await lease.release();
    }
  } catch {
    return null;
  } finally {
    client.close();
  }
}

describe('forwarding relay (laminar relay --forward)', () => {
  it('pushes each version published into it to the master, and to the new master after the master dies', async () => {
    const dirs = [tempShmDir(), tempShmDir(), tempShmDir()];
    const manager = new Manager({ nc: nats.nc, job: JOB, registry: new Registry(), leaseMs: 1000, tickMs: 50, suspectAfterMs: 400, deadAfterMs: 1000 });
    await manager.start();
    await manager.whenLeader();
    const chain: Relay[] = [];
    const control = { nats: nats.server.url, job: JOB, secret: SECRET, heartbeat: '100ms' };
    for (const [i, host] of ['hostA', 'hostB'].entries()) {
      chain.push(await onFreePort((port) => inProcessRelay(dirs[i]!.dir, { ...control, relayId: `r${i}`, host, listen: `127.0.0.1:${port}` })));
      // One at a time, so that r0 joins first and is the master.
      await expect.poll(() => manager.status().chain.map((r) => r.id), { timeout: 10_000 }).toContain(`r${i}`);
    }
    const gateway = await inProcessRelay(dirs[2]!.dir, { relayId: 'trainer-gw' });
    const forwarder = await VersionForwarder.start(gateway.store, {
      nats: parseControlOptions({ nats: nats.server.url, job: JOB }),
      id: 'trainer-gw',
      host: 'hostT',
      secret: SECRET,
      registry: gateway.registry,
    });
    const records: ForwardRecord[] = [];
    forwarder.onRecord((r) => records.push(r));
    const publisher = await RelayClient.connect({ socketPath: gateway.options.socketPath, name: 'python-trainer' });
    try {
      expect(manager.status().master).toBe('r0');
      await publisher.publish({ model: 'm', version: 1, tensors: tensors(1) });
      await expect.poll(() => records.map((r) => `${r.version}:${r.result}:${r.master}`), { timeout: 20_000 }).toEqual(['1:forwarded:r0']);
      await expect.poll(() => holds(chain[1]!, 1), { timeout: 20_000 }).toEqual([1, -1]);
      expect(await holds(chain[0]!, 1)).toEqual([1, -1]);

      // The master goes away; the publisher's next publish is as before: local and error-free.
      await chain[0]!.close();
      const published = await publisher.publish({ model: 'm', version: 2, tensors: tensors(2) });
      expect(published.version).toBe(2);
      await expect.poll(() => records.map((r) => `${r.version}:${r.result}:${r.master}`), { timeout: 30_000 }).toEqual(['1:forwarded:r0', '2:forwarded:r1']);
      expect(await holds(chain[1]!, 2)).toEqual([2, -2]);
      const metrics = await gateway.registry.getSingleMetricAsString('laminar_forward_versions_total');
      expect(metrics).toMatch(/laminar_forward_versions_total\{result="forwarded"\} 2/);
    } finally {
      publisher.close();
      await forwarder.close();
      await gateway.close();
      for (const relay of chain) await relay.close();
      await manager.close();
      for (const d of dirs) d.cleanup();
    }
  }, 90_000);

  it("pushes the next version as deltas against the master's previous one, and full again under --delta off", async () => {
    const dirs = [tempShmDir(), tempShmDir()];
    const job = 'fw-delta';
    const manager = new Manager({ nc: nats.nc, job, registry: new Registry(), leaseMs: 1000, tickMs: 50, suspectAfterMs: 400, deadAfterMs: 1000 });
    await manager.start();
    await manager.whenLeader();
    const control = { nats: nats.server.url, job, secret: SECRET, heartbeat: '100ms' };
    const master = await onFreePort((port) => inProcessRelay(dirs[0]!.dir, { ...control, relayId: 'm0', host: 'hostM', listen: `127.0.0.1:${port}` }));
    await expect.poll(() => manager.status().master, { timeout: 10_000 }).toBe('m0');
    const gateway = await inProcessRelay(dirs[1]!.dir, { relayId: 'gw', chunkSize: '1MiB' });
    const start = (delta: 'on' | 'off'): Promise<VersionForwarder> =>
      VersionForwarder.start(gateway.store, {
        nats: parseControlOptions({ nats: nats.server.url, job }),
        id: 'gw',
        host: 'hostT',
        secret: SECRET,
        registry: gateway.registry,
        delta,
      });
    let forwarder = await start('on');
    const records: ForwardRecord[] = [];
    forwarder.onRecord((r) => records.push(r));
    const publisher = await RelayClient.connect({ socketPath: gateway.options.socketPath, name: 'python-trainer' });
    // 4 MiB of weights in 1 MiB chunks (and a tensor of 8): one value changes from one version to the next.
    const weights = (version: number): { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] => {
      const a = new Float32Array(1024 * 1024).fill(1);
      a[5] = version;
      return [
        { name: 'a', dtype: 'F32', shape: [1024, 1024], data: a },
        { name: 'b', dtype: 'F32', shape: [8], data: new Float32Array(8).fill(-1) },
      ];
    };
    const received = (): { same: number; sparse: number; full: number } => master.broadcaster!.status().delta!.in.chunks;
    try {
      await publisher.publish({ model: 'm', version: 1, tensors: weights(1) });
      await expect.poll(() => records.map((r) => `${r.version}:${r.result}`), { timeout: 20_000 }).toEqual(['1:forwarded']);
      const chunks = master.store.latest('m')!.layout.chunkCount;
      expect(received()).toEqual({ same: 0, sparse: 0, full: chunks });
      await publisher.publish({ model: 'm', version: 2, tensors: weights(2) });
      await expect.poll(() => records.map((r) => `${r.version}:${r.result}`), { timeout: 20_000 }).toEqual(['1:forwarded', '2:forwarded']);
      // The first chunk holds the changed value; the others are the master's v1 as they were.
      expect(received()).toEqual({ same: chunks - 1, sparse: 1, full: chunks });
      expect(await holds(master, 2)).toEqual([1, -1]);
      const client = await RelayClient.connect({ socketPath: master.options.socketPath });
      try {
        await using lease = await client.acquire({ model: 'm', version: 2 });
        expect((lease.tensor('a') as Float32Array)[5]).toBe(2);
      } finally {
        client.close();
      }
      // A forwarder with --delta off pushes full chunks whatever the master holds.
      await forwarder.close();
      forwarder = await start('off');
      forwarder.onRecord((r) => records.push(r));
      await publisher.publish({ model: 'm', version: 3, tensors: weights(3) });
      await expect.poll(() => records.map((r) => `${r.version}:${r.result}`).at(-1), { timeout: 20_000 }).toBe('3:forwarded');
      expect(received()).toEqual({ same: chunks - 1, sparse: 1, full: 2 * chunks });
    } finally {
      publisher.close();
      await forwarder.close();
      await gateway.close();
      await master.close();
      await manager.close();
      for (const d of dirs) d.cleanup();
    }
  }, 90_000);

  it('is refused without a control plane, or with a broadcast of its own', async () => {
    const shm = tempShmDir();
    try {
      // A relay that started after all is killed by the timeout, and its stderr matches nothing.
      const run = (args: string[]): Promise<string> =>
        promisify(execFile)(process.execPath, [CLI, 'relay', '--shm-dir', shm.dir, '--metrics-port', '-1', '--forward', ...args], { timeout: 30_000 }).then(
          () => 'started',
          (err: unknown) => (err as { stderr: string }).stderr,
        );
      expect(await run([])).toMatch(/ERR_INVALID_ARG: --forward needs --nats/);
      expect(await run(['--nats', nats.server.url, '--listen', '127.0.0.1:0'])).toMatch(/ERR_INVALID_ARG: --forward takes no part in the broadcast: --listen/);
    } finally {
      shm.cleanup();
    }
  });
});
