/**
 * A receiver setting up a big segment for an offered version: allocating it takes a while (about
 * 0.4 s per GiB on /dev/shm's 4 KiB pages on the development VM, so most of a minute for a 145 GB
 * model), longer than the sender's stall limit, which runs from the offer on. The receiver
 * accepts the offer at once and sets the segment up meanwhile; it says it is at it, so a healthy
 * relay is not skipped as stalled while it prepares. A setup that fails after the accept is a
 * decline with the failure's code: the sender stops, nothing of the version is served, and the
 * next offer of it is taken.
 */
import { mkdirSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/common/logger.js';
import { BroadcastMetrics } from '../../src/relay/broadcast/metrics.js';
import { RoguePeer, SECRET, buildVersion, builtSource, segmentDigest, sendOver } from '../helpers/broadcast.js';
import { inProcessRelay, loopbackChain, tempShmDir, until } from '../helpers/relay.js';
import { WRITING_SUFFIX, segmentBaseName } from '../../src/relay/segments.js';

process.env.UCX_TLS ??= 'tcp';

const GiB = 2 ** 30;
const STALL_MS = 300;

describe('a receiver that takes longer than the stall limit to set up the segment', () => {
  it('is not dropped as stalled, and the version arrives whole', async () => {
    const shm = tempShmDir();
    // On 4 KiB pages: the slow allocation this test is about (2 MiB pages allocate several times
    // faster, and a 145 GB model still takes long enough).
    const chain = await loopbackChain(1, (_, listen) =>
      inProcessRelay(shm.dir, { relayId: 'r0', listen, secret: SECRET, pin: false, peerTimeout: `${STALL_MS}ms`, hugePages: 'off' }),
    );
    const relay = chain.relays[0]!;
    const address = chain.plan.relays[0]!.address;
    // 1.5 GiB: allocating the segment takes about twice the limit here (0.6 s). Small chunks,
    // so that once the segment is up the limit is far above the time of a window of chunks even
    // on a loaded machine: 64 MiB ones took more than 300 ms there, and the transfer was dropped
    // as stalled after the setup this test is about.
    const built = buildVersion('org/big-setup', 1, 1.5 * GiB, 4 * 1024 * 1024);
    try {
      const peer = await RoguePeer.connect(address, { id: 'trainer', role: 'publisher', relayId: 'r0' });
      try {
        // The relay's status (what its heartbeats tell the manager) shows the setup meanwhile.
        const shown: unknown[] = [];
        const look = setInterval(() => shown.push(...relay.broadcaster!.status().receiving.filter((r) => r.settingUp)), 5);
        const metrics = new BroadcastMetrics(new Registry(), () => 0);
        await expect(sendOver(peer.link, builtSource(built), { window: 4, stallMs: STALL_MS, metrics, log: silentLogger }))
          .resolves.toBe('complete')
          .finally(() => clearInterval(look));
        expect(shown[0]).toEqual({ model: 'org/big-setup', version: 1, hwm: 0, chunks: built.layout.chunkCount, settingUp: true });
      } finally {
        await peer.close();
      }
      const held = relay.store.latest('org/big-setup');
      expect(held?.state).toBe('complete');
      expect(segmentDigest(held!.path)).toBe(built.digest);
    } finally {
      built.mapping.close();
      await relay.close();
      shm.cleanup();
    }
  }, 120_000);
});

describe('a receiver whose segment cannot be set up after it accepted the offer', () => {
  it('declines the version with a typed code, serves nothing of it, and takes the next offer', async () => {
    const shm = tempShmDir();
    const relay = await inProcessRelay(shm.dir, { relayId: 'r0', listen: '127.0.0.1:0', secret: SECRET, pin: false, hugePages: 'off', spareSegments: 0 });
    const model = 'org/no-segment';
    const built = buildVersion(model, 1, 4 * 1024 * 1024, 1024 * 1024);
    // A directory where the version's segment file goes: creating the file fails (EEXIST), the
    // way a file system error would, after the offer was accepted.
    const obstacle = join(relay.store.options.shmDir, segmentBaseName(model, 1) + WRITING_SUFFIX);
    mkdirSync(obstacle);
    const peer = await RoguePeer.connect(`127.0.0.1:${relay.broadcaster!.port}`);
    try {
      await peer.offer(built, model, 1);
      const decline = await peer.waitFor((m) => m.t === 'decline' && m.version === 1);
      expect(decline).toMatchObject({ code: 'ERR_SEGMENT_SETUP', model, version: 1 });
      expect((decline as { message: string }).message).toMatch(/EEXIST|exists/);
      // The accept came first: the relay took the offer before its segment was there.
      const kinds = peer.received.filter((m) => m.t === 'accept' || m.t === 'decline').map((m) => m.t);
      expect(kinds).toEqual(['accept', 'decline']);
      await until('the arrival to be given up', () => (relay.broadcaster!.status().receiving.length === 0 ? true : undefined));
      expect(relay.store.peek(model, 1)).toBeUndefined();
      expect(relay.store.latest(model)).toBeNull();

      // The obstacle gone, the same version offered again arrives whole.
      rmdirSync(obstacle);
      peer.received.length = 0;
      await peer.offer(built, model, 1);
      await peer.waitFor((m) => m.t === 'accept' && m.version === 1);
      for (let i = 0; i < built.layout.chunkCount; i++) await peer.chunk(built, model, 1, i);
      await peer.waitFor((m) => m.t === 'progress' && m.version === 1 && m.complete);
      expect(segmentDigest(relay.store.latest(model)!.path)).toBe(built.digest);
    } finally {
      await peer.close();
      built.mapping.close();
      await relay.close();
      shm.cleanup();
    }
  });
});
