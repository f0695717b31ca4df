/**
 * How a relay's offers and deltas travel to its successor (real relay, real UCX over TCP on
 * loopback): the offer's header and a small sparse delta inline with their message, so that the
 * receiver has them without a rendezvous round trip; a full chunk, and a delta past the inline
 * bound, by rendezvous, pulled by the receiver where it wants them. The successor is a peer the test plays (it accepts with a
 * base, records how each chunk message came, and reports the version complete); the receiving
 * side of inline deltas, rebuilt byte-exact, is in delta-broadcast.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acceptPeer, type PeerLink } from '../../src/relay/broadcast/link.js';
import type { PeerMessage } from '../../src/relay/broadcast/messages.js';
import { baseFingerprint } from '../../src/relay/broadcast/delta/base.js';
import { INLINE_PAYLOAD_MAX_BYTES } from '../../src/relay/broadcast/inline.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { UcxWorker, devicesToward, type Listener } from '../../src/ucx/index.js';
import { SECRET } from '../helpers/broadcast.js';
import { inProcessRelay, publishVisible, tempShmDir, until } from '../helpers/relay.js';

process.env.UCX_TLS ??= 'tcp';

const MiB = 1024 * 1024;
const CHUNK = 4 * MiB;
const CHUNKS = 4;
const MODEL = 'org/inline';

interface ChunkArrival {
  index: number;
  enc: 'same' | 'sparse' | 'full';
  length: number;
  /** The payload came with the message (UCX eager). */
  inline: boolean;
  /** The payload waited at the sender for the receiver to pull it (rendezvous). */
  pulled: boolean;
}

/**
 * A successor the test plays: accepts each offer (naming `base` when set, so that the relay sends
 * deltas against it), records each chunk message and declines its bytes, and reports the version
 * complete once every chunk came.
 */
class RecordingSuccessor {
  readonly chunks = new Map<number, ChunkArrival[]>();
  /** Per version offered: whether its header came inline. */
  readonly offers = new Map<number, boolean>();
  base: { version: number; digest: string } | null = null;
  private listener: Listener | null = null;

  private constructor(readonly worker: UcxWorker) {}

  static async listen(): Promise<RecordingSuccessor> {
    const successor = new RecordingSuccessor(new UcxWorker({ netDevices: await devicesToward('127.0.0.1') }));
    successor.listener = successor.worker.listen('127.0.0.1', 0, (endpoint) => {
      void acceptPeer(endpoint, { selfId: 'd1', secret: Buffer.from(SECRET), timeoutMs: 10_000, admit: () => null }).then((link) => successor.adopt(link));
    });
    return successor;
  }

  get port(): number {
    return this.listener!.port;
  }

  private adopt(link: PeerLink): void {
    link.setHandler((message: PeerMessage, incoming) => {
      const pulled = incoming.pending;
      const inline = incoming.data !== undefined;
      incoming.release();
      if (message.t === 'offer') {
        this.offers.set(message.version, inline && incoming.length === message.headerBytes);
        this.chunks.set(message.version, []);
        void link.send({ t: 'accept', model: message.model, version: message.version, from: 0, have: [], ...(this.base ? { base: this.base } : {}) });
      } else if (message.t === 'chunk') {
        const got = this.chunks.get(message.version)!;
        got.push({ index: message.index, enc: message.enc ?? 'full', length: incoming.length, inline, pulled });
        if (got.length === CHUNKS) void link.send({ t: 'progress', model: message.model, version: message.version, hwm: CHUNKS, complete: true });
      }
    });
  }

  close(): void {
    this.listener?.close();
    this.worker.close();
  }
}

describe('a relay sending deltas to its successor', () => {
  const shm = tempShmDir();
  let relay: Relay;
  let client: RelayClient;
  let successor: RecordingSuccessor;

  beforeAll(async () => {
    relay = await inProcessRelay(shm.dir, {
      relayId: 's0',
      listen: '127.0.0.1:0',
      secret: SECRET,
      pin: false,
      chunkSize: '4MiB',
      retryInterval: '200ms',
      delta: 'on',
    });
    client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    successor = await RecordingSuccessor.listen();
    relay.broadcaster!.setPlan({
      epoch: 1,
      relays: [
        { id: 's0', address: `127.0.0.1:${relay.broadcaster!.port}` },
        { id: 'd1', address: `127.0.0.1:${successor.port}` },
      ],
    });
  });

  afterAll(async () => {
    client.close();
    await relay.close();
    successor.close();
    shm.cleanup();
  });

  const publish = async (version: number, data: Uint8Array): Promise<ChunkArrival[]> => {
    await publishVisible(client, { model: MODEL, version, tensors: [{ name: 'w', dtype: 'U8', shape: [data.length], data }] });
    return until(`the successor to get every chunk of v${version}`, () => {
      const got = successor.chunks.get(version);
      return got !== undefined && got.length === CHUNKS ? [...got].sort((a, b) => a.index - b.index) : undefined;
    });
  };

  it('sends the offer and a small delta inline with their message; full chunks and a delta past the bound by rendezvous', async () => {
    const v1 = new Uint8Array(CHUNKS * CHUNK);
    for (let i = 0; i < v1.length; i++) v1[i] = (Math.imul(i, 2654435761) >>> 13) & 0xff;
    const first = await publish(1, v1);
    // Nobody holds a base yet: every chunk full, each pulled by the receiver.
    expect(first.map((c) => [c.enc, c.pulled, c.inline])).toEqual(Array(CHUNKS).fill(['full', true, false]));

    successor.base = { version: 1, digest: baseFingerprint(relay.store.peek(MODEL, 1)!)! };
    const v2 = v1.slice();
    for (let k = 0; k < 100; k++) v2[CHUNK + 4099 * k] = v2[CHUNK + 4099 * k]! ^ 0x01; // a few words: a small delta
    for (let i = 2 * CHUNK; i < 3 * CHUNK; i += 2) v2[i] = v2[i]! ^ 0x01; // every word's low byte: a delta of about half the chunk
    for (let i = 3 * CHUNK; i < 4 * CHUNK; i++) v2[i] = (v2[i]! + 1) & 0xff; // every byte: full
    const second = await publish(2, v2);
    expect(second.map((c) => c.enc)).toEqual(['same', 'sparse', 'sparse', 'full']);
    const [same, small, large, full] = second as [ChunkArrival, ChunkArrival, ChunkArrival, ChunkArrival];
    expect(same).toMatchObject({ length: 0, pulled: false });
    expect(small.length).toBeLessThanOrEqual(INLINE_PAYLOAD_MAX_BYTES);
    expect(small).toMatchObject({ inline: true, pulled: false });
    expect(large.length).toBeGreaterThan(INLINE_PAYLOAD_MAX_BYTES);
    expect(large).toMatchObject({ inline: false, pulled: true });
    expect(full).toMatchObject({ length: CHUNK, inline: false, pulled: true });
    // Both offers' headers (a few hundred bytes) came with the offer.
    expect(Object.fromEntries(successor.offers)).toEqual({ 1: true, 2: true });
  });
});
