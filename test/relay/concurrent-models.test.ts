/**
 * Two models broadcast at once down one chain, what `--fp8-broadcast also` does (a bf16 version
 * and its `<model>@fp8` on the same links), on loopback (real relays, real UCX over TCP): both
 * arrive byte-exact, and neither waits for the other's whole version. The two transfers share
 * each link: the receiver pulls one chunk at a time per link (PullLane, incoming.ts) in the
 * order the chunks were announced, and each sender keeps its own window in flight, so the
 * announcements, and with them the pulls, alternate between the two versions.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { SECRET, segmentDigest } from '../helpers/broadcast.js';
import { inProcessRelay, loopbackChain, publishVisible, tempShmDir } from '../helpers/relay.js';

process.env.UCX_TLS ??= 'tcp';

const MODELS = ['org/concurrent-a', 'org/concurrent-b'] as const;
const CHUNK = 256 * 1024;
/** Chunks per version: enough that one version alone would be well ahead of the other. */
const CHUNKS = 64;

/** A version's data, distinct per seed, so that a chunk landing in the wrong version shows. */
function data(seed: number): Uint8Array {
  const d = new Uint8Array(CHUNKS * CHUNK);
  for (let i = 0; i < d.length; i += 512) d[i] = (i / 512 + seed * 7) & 0xff;
  return d;
}

describe('relay: two models down one chain at once', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('both arrive byte-exact, their chunks interleaved on the link: neither waits for the other’s whole version', async () => {
    const { relays } = await loopbackChain(2, async (i, listen) => {
      const shm = tempShmDir();
      cleanups.push(() => shm.cleanup());
      const relay = await inProcessRelay(shm.dir, { relayId: `r${i}`, listen, secret: SECRET, pin: false, chunkSize: '256KiB', delta: 'off' });
      cleanups.push(() => relay.close());
      if (i === 0) {
        // Both versions are complete at the master before it knows its successor: once the
        // chain is set it offers both at once, as the master under `also` does once it converted.
        const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
        cleanups.push(() => client.close());
        for (const [n, model] of MODELS.entries()) {
          await publishVisible(client, { model, version: 1, tensors: [{ name: 'w', dtype: 'U8', shape: [CHUNKS * CHUNK], data: data(n) }] });
        }
      }
      return relay;
    });
    const [master, tail] = relays as [Relay, Relay];

    // When the first of the two completes at the tail, how far the other one is there.
    const other = new Promise<{ first: string; otherHwm: number }>((resolve) => {
      const completed = (v: { model: string; version: number }): void => {
        tail.store.off('complete', completed);
        const rest = tail.broadcaster!.status().receiving.find((r) => r.model !== v.model);
        const done = MODELS.some((m) => m !== v.model && tail.store.peek(m, 1)?.state === 'complete');
        resolve({ first: v.model, otherHwm: done ? CHUNKS : (rest?.hwm ?? 0) });
      };
      tail.store.on('complete', completed);
    });
    const both = Promise.all(
      MODELS.map(
        (model) =>
          new Promise<void>((resolve) => {
            const check = (v: { model: string; version: number }): void => {
              if (v.model !== model) return;
              tail.store.off('complete', check);
              resolve();
            };
            tail.store.on('complete', check);
          }),
      ),
    );
    const { otherHwm } = await other;
    await both;

    for (const model of MODELS) {
      expect(segmentDigest(tail.store.peek(model, 1)!.path)).toBe(segmentDigest(master.store.peek(model, 1)!.path));
    }
    // One version after the other would leave the second with nothing verified (hwm 0) when the
    // first completes; interleaved, the second is most of the way there. A quarter leaves room
    // for one segment set up later than the other's (its chunks wait, the other's go meanwhile).
    expect(otherHwm).toBeGreaterThanOrEqual(CHUNKS / 4);
  });
});
