/**
 * A publish returns once the bytes are in the master's segment and the commit is sent; the relay
 * verifies the version after, and only then does anyone see it: acquire, watch, `status` and
 * `laminar versions`, the relay downstream. A version whose bytes changed after they were
 * checksummed fails visibly (`visible` rejects with the checksum code, the relay counts it), is
 * discarded, and the previous version keeps being served.
 *
 * Deterministic: the master's step from "verified" to "complete" is held (wrapped in the
 * in-process relay's store) while the test looks at every way a version could be seen.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import type { VersionEvent } from '../../src/relay/protocol/messages.js';
import type { StoredVersion, VersionStore } from '../../src/relay/store.js';
import { SECRET } from '../helpers/broadcast.js';
import { CLI, inProcessRelay, loopbackChain, metricValue, tempShmDir } from '../helpers/relay.js';

process.env.UCX_TLS ??= 'tcp';

const MODEL = 'org/visible';
const ROWS = 1024;

function tensors(version: number): { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] {
  return [
    { name: 'w', dtype: 'F32', shape: [ROWS, 256], data: new Float32Array(ROWS * 256).fill(version) },
    { name: 'b', dtype: 'F32', shape: [256], data: Float32Array.from({ length: 256 }, (_, i) => i + version) },
  ];
}

/**
 * Holds the store's last step of a commit (the version read and verified, about to be complete
 * and served) for the versions `which` picks, until release(). `reached` resolves when a version
 * got there.
 */
function holdCompletion(store: VersionStore, which: (v: StoredVersion) => boolean): { reached: Promise<void>; release(): void; restore(): void } {
  const target = store as unknown as { complete: (v: StoredVersion, ...rest: unknown[]) => Promise<void> };
  const original = target.complete;
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let reach!: () => void;
  const reached = new Promise<void>((resolve) => (reach = resolve));
  target.complete = async function (this: unknown, v: StoredVersion, ...rest: unknown[]): Promise<void> {
    if (which(v)) {
      reach();
      await released;
    }
    return original.call(this, v, ...rest);
  };
  return { reached, release, restore: () => void (target.complete = original) };
}

/** Every version event of a watch on `client`, from the moment this resolves. */
async function watchAll(client: RelayClient, signal: AbortSignal): Promise<VersionEvent[]> {
  const seen: VersionEvent[] = [];
  const events = client.watch({ model: MODEL, signal })[Symbol.asyncIterator]();
  const pump = async (): Promise<void> => {
    for (let next = await events.next(); !next.done; next = await events.next()) seen.push(next.value);
  };
  void pump().catch(() => undefined);
  // Requests on one connection are answered in order: once status answers, the watch is in place.
  await client.status();
  return seen;
}

/** Tracks whether a promise settled yet (without ever leaving a rejection unhandled). */
function settledFlag(p: Promise<unknown>): { settled: boolean } {
  const flag = { settled: false };
  p.then(
    () => (flag.settled = true),
    () => (flag.settled = true),
  );
  return flag;
}

describe('publish: the stall is the write; the version is served once verified', () => {
  const dirs: { cleanup(): void }[] = [];
  const relays: Relay[] = [];
  const received: number[] = []; // versions completed at the relay downstream, in order
  let trainer: RelayClient;
  let reader: RelayClient;
  let downstream: RelayClient;
  const stop = new AbortController();

  beforeAll(async () => {
    await loopbackChain(2, async (i, listen) => {
      const shm = tempShmDir();
      dirs.push(shm);
      const relay = await inProcessRelay(shm.dir, { relayId: `r${i}`, listen, secret: SECRET, pin: false, chunkSize: '256KiB', peerTimeout: '5s' });
      relays.push(relay);
      return relay;
    });
    relays[1]!.store.on('complete', (v) => v.model === MODEL && received.push(v.version));
    trainer = await RelayClient.connect({ socketPath: relays[0]!.options.socketPath, name: 'trainer' });
    reader = await RelayClient.connect({ socketPath: relays[0]!.options.socketPath, name: 'reader' });
    downstream = await RelayClient.connect({ socketPath: relays[1]!.options.socketPath, name: 'downstream reader' });
  });

  afterAll(async () => {
    stop.abort();
    for (const c of [trainer, reader, downstream]) c.close();
    for (const r of relays) await r.close();
    for (const d of dirs) d.cleanup();
  });

  const arrivedDownstream = (version: number): Promise<void> =>
    new Promise((resolve) => relays[1]!.store.on('complete', (v) => v.model === MODEL && v.version === version && resolve()));

  it('returns before the relay verified the version, which nothing acquires, watches, lists or receives until then', async () => {
    const watched = await watchAll(reader, stop.signal);
    const waiting = reader.acquire({ model: MODEL, atLeast: 1, timeoutMs: 60_000 });
    const acquired = settledFlag(waiting);
    const hold = holdCompletion(relays[0]!.store, (v) => v.model === MODEL && v.version === 1);
    try {
      // Resolves while the version cannot complete: publish() does not wait for the verification.
      const result = await trainer.publish({ model: MODEL, version: 1, tensors: tensors(1) });
      expect(result).toMatchObject({ model: MODEL, version: 1 });
      const visible = settledFlag(result.visible);
      await hold.reached; // the master read every byte; the version waits to be made complete

      expect(visible.settled).toBe(false);
      expect((await reader.status()).versions).toMatchObject([{ model: MODEL, version: 1, state: 'verifying', dir: null }]);
      const { stdout } = await promisify(execFile)(process.execPath, [CLI, 'versions', '--socket', relays[0]!.options.socketPath]);
      expect(stdout).toMatch(new RegExp(`${MODEL}\\s+1\\s+verifying`));
      expect(stdout).not.toMatch(/complete/);
      await expect(reader.acquire({ model: MODEL })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_VERSION });
      expect(acquired.settled).toBe(false);
      expect(watched).toEqual([]);
      // Nothing went down the chain: the downstream relay has not been offered it.
      const below = await downstream.status();
      expect(below.versions).toEqual([]);
      expect(below.broadcast?.receiving).toEqual([]);
      expect((await reader.status()).broadcast?.downstream?.sending ?? []).toEqual([]);
      expect(received).toEqual([]);

      const below1 = arrivedDownstream(1);
      hold.release();
      const served = await result.visible;
      expect(served.checksums?.length).toBeGreaterThan(1);
      expect(served.dir).not.toBeNull();
      const lease = await waiting;
      expect(lease.version).toBe(1);
      expect((lease.tensor('b') as Float32Array)[3]).toBe(4);
      await lease.release();
      await expect.poll(() => watched.map((e) => e.version)).toEqual([1]);
      await below1;
      expect(received).toEqual([1]);
    } finally {
      hold.restore();
      hold.release();
    }
  }, 60_000);

  it('rejects visible with the checksum error for bytes changed after publish, counts it, discards the version, and keeps serving the previous one', async () => {
    const watched = await watchAll(reader, stop.signal);
    const waiting = reader.acquire({ model: MODEL, atLeast: 2, timeoutMs: 60_000 });
    const rejectedBefore = metricValue(await relays[0]!.registry.metrics(), 'laminar_relay_publishes_total', 'result="rejected"');

    const pub = await trainer.beginPublish({ model: MODEL, version: 2, tensors: tensors(2).map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    await Promise.all(tensors(2).map((t) => pub.writeAsync(t.name, t.data)));
    // A stray write through the writer's mapping after the copy took its checksums.
    pub.bytes('w')[4 * ROWS * 100 + 7]! ^= 0xff;
    const segmentPath = pub.description.path;
    const result = await pub.commit(); // the stall is over: nothing was checked yet
    await expect(result.visible).rejects.toMatchObject({ code: ErrorCodes.CHECKSUM_MISMATCH, details: { mismatched: ['w'] } });

    // Counted by the relay; aborted by the client before `visible` rejected: no segment left.
    expect(metricValue(await relays[0]!.registry.metrics(), 'laminar_relay_publishes_total', 'result="rejected"')).toBe(rejectedBefore + 1);
    expect((await reader.status()).versions.map((v) => `${v.version}:${v.state}`)).toEqual(['1:complete']);
    expect(existsSync(segmentPath)).toBe(false);
    expect(readdirSync(relays[0]!.options.shmDir).filter((f) => f.includes('.v2.'))).toEqual([]);
    const lease = await reader.acquire({ model: MODEL });
    expect(lease.version).toBe(1);
    await lease.release();

    // The next version goes through. Whoever waited for a newer one gets it, never version 2;
    // the watch and the relay downstream saw it, and never version 2 before it.
    const below3 = arrivedDownstream(3);
    await (
      await trainer.publish({ model: MODEL, version: 3, tensors: tensors(3) })
    ).visible;
    const next = await waiting;
    expect(next.version).toBe(3);
    await next.release();
    await expect.poll(() => watched.map((e) => e.version)).toEqual([3]);
    await below3;
    expect(received).toEqual([1, 3]);
  }, 60_000);

  it('publish() fails, instead of returning, when the connection is gone before the commit is sent', async () => {
    const doomed = await RelayClient.connect({ socketPath: relays[0]!.options.socketPath, reconnect: false });
    const pub = await doomed.beginPublish({ model: MODEL, version: 4, tensors: tensors(4).map(({ name, dtype, shape }) => ({ name, dtype, shape })) });
    doomed.close();
    await expect(pub.commit()).rejects.toMatchObject({ code: ErrorCodes.CLOSED });
  });
});
