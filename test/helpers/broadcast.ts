/**
 * Helpers for broadcast tests: versions built in local memory exactly as a relay lays them out,
 * and a peer speaking the relay protocol directly, to send what a well-behaved relay never would.
 */
import { Mapping, checksumHex } from '../../src/native/index.js';
import { chunkRange, encodeHeader, planLayout, type VersionLayout } from '../../src/safetensors/header.js';
import { connectPeer, type PeerLink, type PeerRole } from '../../src/relay/broadcast/link.js';
import type { PeerMessage } from '../../src/relay/broadcast/messages.js';
import { OutgoingTransfer, type OutgoingOptions, type OutgoingResult } from '../../src/relay/broadcast/outgoing.js';
import type { ChunkSource } from '../../src/relay/broadcast/source.js';
import type { IncomingMessage } from '../../src/ucx/index.js';
import { UcxWorker, devicesToward, parseAddress } from '../../src/ucx/index.js';

export const SECRET = 'test-job-secret-0123456789';

export interface BuiltVersion {
  model: string;
  version: number;
  layout: VersionLayout;
  mapping: Mapping;
  checksums: string[];
  /** XXH3 of the whole segment, to compare relays' copies. */
  digest: string;
}

/** A version of `bytes` bytes (one U8 tensor) with a deterministic pattern, as a relay holds it. */
export function buildVersion(model: string, version: number, bytes: number, chunkSize: number, seed = 1): BuiltVersion {
  const layout = planLayout([{ name: 'w', dtype: 'U8', shape: [bytes] }], { model, version, chunkSize });
  const mapping = new Mapping(null, { size: layout.totalSize });
  const data = new Uint8Array(mapping.view(layout.dataOffset, layout.dataLength));
  for (let i = 0; i < data.length; i += 509) data[i] = (Math.imul(i, 2654435761) + seed) & 0xff;
  const checksums = Array.from({ length: layout.chunkCount }, (_, i) => {
    const { offset, length } = chunkRange(layout, i);
    return checksumHex(mapping.checksum(offset, length));
  });
  mapping.write(0, encodeHeader(layout, { model, version, chunkSize, checksums }));
  return { model, version, layout, mapping, checksums, digest: checksumHex(mapping.checksum(0, layout.totalSize)) };
}

/** A built version as a sender's source: every chunk at hand, unless `gate` holds some back. */
export function builtSource(built: BuiltVersion, gate?: Pick<ChunkSource, 'available' | 'whenAvailable'>): ChunkSource {
  return {
    model: built.model,
    version: built.version,
    layout: built.layout,
    mapping: built.mapping,
    available: gate?.available ?? (() => true),
    whenAvailable: gate?.whenAvailable ?? (() => Promise.resolve()),
  };
}

/** Sends `source` over `link` as a relay would (offer, window, resends), with the peer's answers fed back. */
export function sendOver(link: PeerLink, source: ChunkSource, options: OutgoingOptions): Promise<OutgoingResult> {
  const transfer = new OutgoingTransfer(link, source, options);
  link.setHandler((message, incoming) => {
    incoming.release();
    transfer.handle(message);
  });
  return transfer.start();
}

/** The XXH3 of a whole segment file. */
export function segmentDigest(path: string): string {
  const m = new Mapping(path, { writable: false });
  try {
    return checksumHex(m.checksum(0, m.size));
  } finally {
    m.close();
  }
}

/** An authenticated peer whose every received message is recorded. */
export class RoguePeer {
  readonly received: PeerMessage[] = [];
  private waiters: (() => void)[] = [];

  private constructor(
    readonly worker: UcxWorker,
    readonly link: PeerLink,
  ) {
    link.setHandler((message: PeerMessage, incoming: IncomingMessage) => {
      incoming.release();
      this.received.push(message);
      for (const w of this.waiters.splice(0)) w();
    });
  }

  static async connect(address: string, options: { id?: string; role?: PeerRole; secret?: string; relayId?: string | null } = {}): Promise<RoguePeer> {
    // The devices a real pusher would use (the routed interface): other interfaces of this host,
    // such as another suite's testbed bridges, are not the peer's network.
    const worker = new UcxWorker({ netDevices: await devicesToward(parseAddress(address).host) });
    try {
      const link = await connectPeer(worker, options.relayId ?? null, address, {
        selfId: options.id ?? 'rogue',
        role: options.role ?? 'publisher',
        secret: Buffer.from(options.secret ?? SECRET),
        epoch: 0,
        timeoutMs: 5000,
      });
      return new RoguePeer(worker, link);
    } catch (err) {
      worker.close();
      throw err;
    }
  }

  /** Waits for a received message matching `match`. */
  async waitFor(match: (m: PeerMessage) => boolean, timeoutMs = 10_000): Promise<PeerMessage> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.received.find(match);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`no matching message; got ${JSON.stringify(this.received.map((m) => m.t))}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 100);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  async offer(v: BuiltVersion, model: string, version: number): Promise<void> {
    await this.link.send(
      { t: 'offer', model, version, size: v.layout.totalSize, headerBytes: v.layout.dataOffset },
      { source: v.mapping, offset: 0, length: v.layout.dataOffset },
    );
  }

  async chunk(v: BuiltVersion, model: string, version: number, index: number, source?: Mapping): Promise<void> {
    const { offset, length } = chunkRange(v.layout, Math.min(index, v.layout.chunkCount - 1));
    await this.link.send({ t: 'chunk', model, version, index }, { source: source ?? v.mapping, offset, length });
  }

  async close(): Promise<void> {
    await this.link.close();
    this.worker.close();
  }
}
