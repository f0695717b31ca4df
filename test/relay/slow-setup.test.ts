/**
 * A receiver setting up a big segment for an offered version: allocating it takes a while (about
 * 0.4 s per GiB on /dev/shm's 4 KiB pages on the development VM, so most of a minute for a 145 GB
 * model), longer than the sender's stall limit, which runs from the offer on. The receiver says
 * it is at it, so a healthy relay is not skipped as stalled while it prepares.
 */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/common/logger.js';
import { BroadcastMetrics } from '../../src/relay/broadcast/metrics.js';
import { RoguePeer, SECRET, buildVersion, builtSource, segmentDigest, sendOver } from '../helpers/broadcast.js';
import { inProcessRelay, loopbackChain, tempShmDir } from '../helpers/relay.js';

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
