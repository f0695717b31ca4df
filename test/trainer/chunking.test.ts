/**
 * A trainer's remote push is cut in the chunk size the master chooses (its chunk model for the
 * chain under the manager's plan, the push being one more hop), unless the trainer was given one;
 * a forwarding relay lays the versions published into it out in the master's choice too; and the
 * manager's status (what `laminar status` prints) shows the master's choice from its heartbeat.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { Manager } from '../../src/manager/manager.js';
import { formatStatus } from '../../src/manager/status-table.js';
import { parseControlOptions } from '../../src/control/nats-options.js';
import { chooseChunkSize } from '../../src/relay/chunking/chunk-choice.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { VersionForwarder } from '../../src/relay/forwarding.js';
import { TrainerClient } from '../../src/trainer/trainer-client.js';
import { inProcessRelay, onFreePort, publishVisible, relayChunking, tempShmDir, until } from '../helpers/relay.js';
import { natsFixture } from '../data/helpers.js';

process.env.UCX_TLS ??= 'tcp';

const SECRET = 'trainer-chunking-test-secret-0123456789';
const JOB = 'tc';
const MiB = 2 ** 20;
const nats = natsFixture();

function tensors(version: number, bytes: number): { name: string; dtype: 'U8'; shape: number[]; data: Uint8Array }[] {
  const data = new Uint8Array(bytes).fill(version);
  return [{ name: 'w', dtype: 'U8', shape: [bytes], data }];
}

/** Waits until `relay` holds `version` of `model` complete; its chunk size. */
function heldChunk(relay: Relay, model: string, version: number): Promise<number> {
  return until(`${model} v${version} at ${relay.options.relayId}`, () => {
    const v = relay.store.latest(model);
    return v?.version === version && v.state === 'complete' ? v.layout.chunkSize : undefined;
  });
}

describe("the master's chunk size for trainers", () => {
  it("cuts a TrainerClient push and a forwarding relay's versions as the master chooses, and shows the choice in the status", async () => {
    const dirs = [tempShmDir(), tempShmDir(), tempShmDir(), tempShmDir()];
    const manager = new Manager({ nc: nats.nc, job: JOB, registry: new Registry(), leaseMs: 1000, tickMs: 50 });
    await manager.start();
    await manager.whenLeader();
    const chain: Relay[] = [];
    const closers: (() => Promise<unknown>)[] = [];
    try {
      const control = { nats: nats.server.url, job: JOB, secret: SECRET, heartbeat: '100ms', pin: false, keepVersions: 0, spareSegments: 0 };
      for (const [i, host] of ['hostA', 'hostB', 'hostC'].entries()) {
        chain.push(await onFreePort((port) => inProcessRelay(dirs[i]!.dir, { ...control, relayId: `r${i}`, host, listen: `127.0.0.1:${port}` })));
        // One at a time, so that r0 joins first and is the master.
        await expect.poll(() => manager.status().chain.map((r) => r.id), { timeout: 10_000 }).toContain(`r${i}`);
      }
      await expect.poll(async () => (await relayChunking(chain[0]!)).p, { timeout: 10_000 }).toBe(3);
      const master = await relayChunking(chain[0]!);
      // The trainer's push is the chain's first hop: p = 3 relays + 1. Nothing measured yet: the defaults.
      const bytes = 40 * MiB;
      const expected = chooseChunkSize(bytes, 4, { bandwidth: master.bandwidth, startup: master.chunkCost }).chunkSize;
      expect(expected).toBeLessThan(32 * MiB);

      const trainer = await TrainerClient.connect({ nats: { nc: nats.nc, job: JOB }, host: 'hostT', secret: SECRET, masterWaitMs: 20_000 });
      closers.push(() => trainer.close());
      const pushed = await trainer.publish({ model: 'm', version: 1, tensors: tensors(1, bytes) });
      expect(pushed).toMatchObject({ mode: 'remote', master: 'r0' });
      for (const relay of chain) expect(await heldChunk(relay, 'm', 1)).toBe(expected);
      expect((await relayChunking(chain[0]!)).last).toMatchObject({ bytes, p: 4, chunkSize: expected, advisedBy: null });

      // The manager has it from the master's heartbeat, and `laminar status` says it.
      await expect.poll(() => manager.status().chain[0]?.chunking?.last?.chunkSize, { timeout: 10_000 }).toBe(expected);
      expect(formatStatus(manager.status())).toMatch(/r0: chunk [\d.]+ MiB for 40\.0 MiB \(auto: p=4, /);
      // And the page size of each relay's segments (these in-process relays mount their huge-page tmpfs).
      await expect.poll(() => manager.status().chain.map((r) => r.pageSize), { timeout: 10_000 }).toEqual(chain.map(() => 2 * MiB));

      // A trainer given a chunk size keeps it.
      const fixed = await TrainerClient.connect({ nats: { nc: nats.nc, job: JOB }, id: 'trainer-fixed', host: 'hostT', secret: SECRET, chunkSize: 8 * MiB });
      closers.push(() => fixed.close());
      await fixed.publish({ model: 'f', version: 1, tensors: tensors(1, bytes) });
      for (const relay of chain) expect(await heldChunk(relay, 'f', 1)).toBe(8 * MiB);

      // A forwarding relay (what a Python trainer publishes into) lays versions out as the master would.
      const gateway = await inProcessRelay(dirs[3]!.dir, { relayId: 'trainer-gw', pin: false });
      closers.push(() => gateway.close());
      const forwarder = await VersionForwarder.start(gateway.store, {
        nats: parseControlOptions({ nats: nats.server.url, job: JOB }),
        id: 'trainer-gw',
        host: 'hostT',
        secret: SECRET,
        registry: gateway.registry,
      });
      closers.push(() => forwarder.close());
      const masterNow = await until('the master to take in its hops', async () => {
        const c = await relayChunking(chain[0]!);
        return c.measured.hops === 2 && chain[0]!.broadcaster?.busy === false ? c : undefined;
      });
      const gbytes = 24 * MiB;
      const advised = chooseChunkSize(gbytes, 4, { bandwidth: masterNow.bandwidth, startup: masterNow.chunkCost }).chunkSize;
      const publisher = await RelayClient.connect({ socketPath: gateway.options.socketPath, name: 'python-trainer' });
      closers.push(() => {
        publisher.close();
        return Promise.resolve();
      });
      const described = await publishVisible(publisher, { model: 'g', version: 1, tensors: tensors(1, gbytes) });
      expect(described.chunkSize).toBe(advised);
      expect((await relayChunking(gateway)).last).toMatchObject({ chunkSize: advised, advisedBy: 'master' });
      for (const relay of chain) expect(await heldChunk(relay, 'g', 1)).toBe(advised);
    } finally {
      for (const close of closers.reverse()) await close().catch(() => undefined);
      for (const relay of chain) await relay.close();
      await manager.close();
      for (const d of dirs) d.cleanup();
    }
  }, 90_000);
});
