/**
 * A version arriving over two links at once, as in chain repair: the stalled upstream's copy of a
 * chunk is still on its way when the new upstream's copy lands and is verified. Whatever the
 * stale copy brings afterwards must not be written into the version, which is by then forwarded
 * and served. The store is a real relay's; the links are played by the test: a message whose
 * payload is pulled only when the test says so stands for a slow rendezvous on a stalled link.
 */
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/common/logger.js';
import { checksumHex, type Mapping } from '../../src/native/index.js';
import { baseFingerprint } from '../../src/relay/broadcast/delta/base.js';
import { IncomingTransfer, PullLane, type ArrivalBase } from '../../src/relay/broadcast/incoming.js';
import { BroadcastMetrics } from '../../src/relay/broadcast/metrics.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { encodeChunk } from '../../src/relay/delta/codec.js';
import { parseOffered } from '../../src/relay/store/offered-version.js';
import type { StoredVersion } from '../../src/relay/store.js';
import { chunkRange } from '../../src/safetensors/header.js';
import { IncomingMessage } from '../../src/ucx/index.js';
import { inProcessRelay, publishVisible, tempShmDir } from '../helpers/relay.js';

const MODEL = 'org/arrivals';
const BYTES = 256 * 1024; // four chunks of 64 KiB

/** bf16-like weights: version `step` moves a few words of the first chunk. */
function weights(step: number): Uint8Array {
  const data = new Uint8Array(BYTES);
  for (let i = 0; i < BYTES; i++) data[i] = (i * 31) & 0xff;
  for (let w = 0; w < 64 && step > 1; w++) data[2 * w * 97] = (data[2 * w * 97]! + step) & 0xff;
  return data;
}

/** A message whose payload is here inline (a full chunk sent eagerly). */
function inlineMessage(payload: Uint8Array): IncomingMessage {
  return new IncomingMessage(null as never, Buffer.alloc(0), payload.byteLength, Buffer.from(payload), undefined, false);
}

/**
 * A message whose payload waits at its sender until `deliver()`: a rendezvous on a slow link.
 * `pulling` settles once the receiver has asked for the payload.
 */
function heldMessage(payload: Uint8Array): { message: IncomingMessage; pulling: Promise<void>; deliver(): void } {
  let deliver!: () => void;
  let pulled!: () => void;
  const delivered = new Promise<void>((resolve) => (deliver = resolve));
  const pulling = new Promise<void>((resolve) => (pulled = resolve));
  const link = {
    async receive(_desc: number, target: Mapping | Uint8Array, offset: number): Promise<void> {
      pulled();
      await delivered;
      if (target instanceof Uint8Array) target.set(payload, offset);
      else target.write(offset, payload);
    },
    release: () => undefined,
  };
  return { message: new IncomingMessage(link as never, Buffer.alloc(0), payload.byteLength, undefined, 1, false), pulling, deliver };
}

describe('a version arriving over a stalled and a new upstream', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let sender: Relay;
  let receiver: Relay;

  beforeAll(async () => {
    tmp = tempShmDir();
    sender = await inProcessRelay(`${tmp.dir}/sender`, { chunkSize: '64KiB', spareSegments: 0 });
    receiver = await inProcessRelay(`${tmp.dir}/receiver`, { chunkSize: '64KiB', spareSegments: 0 });
    for (const [relay, versions] of [
      [sender, [1, 2]],
      [receiver, [1]],
    ] as const) {
      const client = await RelayClient.connect({ socketPath: relay.options.socketPath, reconnect: false });
      for (const version of versions) {
        await publishVisible(client, { model: MODEL, version, tensors: [{ name: 'w', dtype: 'U8', shape: [BYTES], data: weights(version) }] });
      }
      client.close();
    }
  });
  afterAll(async () => {
    await receiver.close();
    await sender.close();
    tmp.cleanup();
  });

  const held = (relay: Relay, version: number): StoredVersion => relay.store.list().find((v) => v.model === MODEL && v.version === version)!;
  const bytesOf = (v: StoredVersion, offset: number, length: number): Uint8Array => new Uint8Array(v.mapping!.view(offset, length)).slice();

  it('writes nothing of a stale delta that lands after the new upstream verified the chunk', async () => {
    const sent = held(sender, 2);
    const header = bytesOf(sent, 0, sent.layout.dataOffset);
    const offered = parseOffered(header, sent.layout.totalSize, { model: MODEL, version: 2 });
    const { v, ready } = receiver.store.reserveReceive(offered);
    const baseVersion = held(receiver, 1);
    const base: ArrivalBase = { v: baseVersion, ref: { version: 1, digest: baseFingerprint(baseVersion)! } };
    const transfer = new IncomingTransfer(
      receiver.store,
      v,
      offered.checksums,
      new BroadcastMetrics(new Registry(), () => 0),
      silentLogger,
      base,
      ready,
      header,
    );
    await ready;

    // The stalled upstream (link 1) sends chunk 0 as a delta that rebuilds other bytes than
    // version 2's: the torn read of a chunk, say. Only a write of it would show in the segment.
    const chunk0 = chunkRange(v.layout, 0);
    const baseChunk = bytesOf(baseVersion, chunk0.offset, chunk0.length);
    const other = weights(3).subarray(0, chunk0.length);
    const stale = encodeChunk(baseChunk, other);
    expect(stale.kind).toBe('sparse');
    const slow = heldMessage(stale.payload);
    transfer.setUpstream(1);
    const staleOutcome = transfer.receive(0, slow.message, 1, new PullLane(), 'sparse');
    await slow.pulling;

    // The new upstream (link 2) sends every chunk in full, the first one first.
    transfer.setUpstream(2);
    const lane = new PullLane();
    const fromNewUpstream = (i: number): Promise<string> => {
      const { offset, length } = chunkRange(sent.layout, i);
      return transfer.receive(i, inlineMessage(bytesOf(sent, offset, length)), 2, lane);
    };
    expect(await fromNewUpstream(0)).toBe('verified');

    // Then the stale payload arrives: taken as a duplicate, the verified chunk untouched by it,
    // and the version completed with the rest of the chunks holds version 2's bytes.
    slow.deliver();
    expect(await staleOutcome).toBe('duplicate');
    for (let i = 1; i < v.layout.chunkCount; i++) expect(await fromNewUpstream(i)).toBe('verified');
    await transfer.done;
    expect(v.state).toBe('complete');
    for (let i = 0; i < v.layout.chunkCount; i++) {
      const { offset, length } = chunkRange(v.layout, i);
      expect(checksumHex(v.mapping!.checksum(offset, length)), `chunk ${i}`).toBe(offered.checksums[i]);
    }
  });
});
