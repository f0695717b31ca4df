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
import { inProcessRelay, loopbackChain, metricValue, publishVisible, relayChunking, tempShmDir, until, versionComplete } from '../helpers/relay.js';

process.env.UCX_TLS ??= 'tcp';

const MODELS = ['org/concurrent-a', 'org/concurrent-b'] as const;
const CHUNK = 512 * 1024;
/** Chunks per version: enough that one version alone would be well ahead of the other, and a hop (32 MiB) the master times. */
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

  const publish = (client: RelayClient, model: string, version: number, seed: number): Promise<unknown> =>
    publishVisible(client, { model, version, tensors: [{ name: 'w', dtype: 'U8', shape: [CHUNKS * CHUNK], data: data(seed) }] });

  /**
   * A chain of two relays whose master holds version 1 of both models before it knows its
   * successor: once the chain is set it offers both at once, as the master under `also` does once
   * it converted. Resolves with the relays once the chain is set.
   */
  async function bothOffered(): Promise<{ master: Relay; tail: Relay; client: RelayClient }> {
    let client: RelayClient | undefined;
    const { relays } = await loopbackChain(2, async (i, listen) => {
      const shm = tempShmDir();
      cleanups.push(() => shm.cleanup());
      const relay = await inProcessRelay(shm.dir, { relayId: `r${i}`, listen, secret: SECRET, pin: false, chunkSize: '512KiB', delta: 'off' });
      cleanups.push(() => relay.close());
      if (i === 0) {
        client = await RelayClient.connect({ socketPath: relay.options.socketPath });
        cleanups.push(() => client!.close());
        for (const [n, model] of MODELS.entries()) await publish(client, model, 1, n);
      }
      return relay;
    });
    return { master: relays[0]!, tail: relays[1]!, client: client! };
  }

  it('both arrive byte-exact, their chunks interleaved on the link: neither waits for the other’s whole version', async () => {
    // Nothing has crossed yet: the link is set up after the plan, and a version takes many reads.
    const { master, tail } = await bothOffered();
    const both = Promise.all(MODELS.map((m) => versionComplete(tail, m, 1)));

    // When the first of the two completes at the tail, how far the other one is there.
    const other = new Promise<number>((resolve) => {
      const completed = (v: { model: string; version: number }): void => {
        tail.store.off('complete', completed);
        const rest = tail.broadcaster!.status().receiving.find((r) => r.model !== v.model);
        const done = MODELS.some((m) => m !== v.model && tail.store.peek(m, 1)?.state === 'complete');
        resolve(done ? CHUNKS : (rest?.hwm ?? 0));
      };
      tail.store.on('complete', completed);
    });
    const otherHwm = await other;
    await both;

    for (const model of MODELS) {
      expect(segmentDigest(tail.store.peek(model, 1)!.path)).toBe(segmentDigest(master.store.peek(model, 1)!.path));
    }
    // One version after the other would leave the second with nothing verified (hwm 0) when the
    // first completes; interleaved, the second is most of the way there. A quarter leaves room
    // for one segment set up later than the other's (its chunks wait, the other's go meanwhile).
    expect(otherHwm).toBeGreaterThanOrEqual(CHUNKS / 4);
  });

  it('a hop that shared its link with another version is not timed as the link’s; the next one alone is', async () => {
    const { master, tail, client } = await bothOffered();
    await Promise.all(MODELS.map((m) => versionComplete(tail, m, 1)));
    // The next version of one model, alone on the link.
    const alone = versionComplete(tail, MODELS[0], 2);
    await publish(client, MODELS[0], 2, 5);
    await alone;
    // Hops the master handed to its chunk-size model, measurement or not (too small).
    const taken = async (): Promise<number> => {
      const text = await master.registry.metrics();
      const name = 'laminar_relay_link_hops_measured_total';
      return metricValue(text, name, 'result="used"') + metricValue(text, name, 'result="too_small"');
    };
    // The master records a hop when the tail reports the version complete, in the order of the
    // link's messages: the two shared hops, had they been taken, before the one alone.
    const hops = await until('the master to take the hop of version 2', async () => ((await taken()) >= 1 && !master.broadcaster!.busy ? taken() : undefined));
    expect(hops).toBe(1);
    expect((await relayChunking(master)).measured.hops).toBe(1);
  });
});
