/**
 * A client outlives its relay process: after a SIGKILL and a restart on the same shared memory,
 * requests connect again, watches subscribe again without repeating what they delivered, and
 * leases of the lost connection are released without an error (the relay gave them up).
 */
import { createServer } from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { spawnRelay, publishVisible, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const MODEL = 'org/restarting';
const ARGS = ['--keep-versions', '5', '--chunk-size', '16KiB', '--no-pin'];

/** How long to wait for an event before calling it lost (a loaded machine is slow, not wrong). */
const EVENT = { timeout: 20_000 };

const weights = (v: number) => [{ name: 'w', dtype: 'F32' as const, shape: [2048], data: Float32Array.from({ length: 2048 }, (_, i) => i + v) }];

describe('relay client across relay restarts', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let relays: RelayProcess[];
  const clients: RelayClient[] = [];
  beforeEach(() => {
    tmp = tempShmDir();
    relays = [];
  });
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    await Promise.all(relays.map((r) => r.stop('SIGKILL')));
    tmp.cleanup();
  });

  async function relay(): Promise<RelayProcess> {
    const r = await spawnRelay(tmp.dir, ARGS);
    relays.push(r);
    return r;
  }

  async function client(r: RelayProcess, options: { reconnect?: boolean } = {}): Promise<RelayClient> {
    const c = await RelayClient.connect({ socketPath: r.socketPath, ...options });
    clients.push(c);
    return c;
  }

  async function kill(r: RelayProcess): Promise<void> {
    r.child.kill('SIGKILL');
    expect(await r.exited).toBe('SIGKILL');
  }

  it('connects again on the next request, resubscribes watches and drops the lost leases quietly', async () => {
    const first = await relay();
    const rollout = await client(first);
    const trainer = await client(first, { reconnect: false });
    await publishVisible(trainer, { model: MODEL, version: 1, tensors: weights(1) });
    const lease = await rollout.acquire({ model: MODEL });

    const stop = new AbortController();
    const seen: number[] = [];
    // With replay, the watch delivers v1 once it is subscribed: that, not a pause, says v2 will reach it.
    const watching = (async () => {
      for await (const ev of rollout.watch({ model: MODEL, replay: true, signal: stop.signal })) seen.push(ev.version);
    })();
    await vi.waitFor(() => expect(seen).toEqual([1]), EVENT);
    await publishVisible(trainer, { model: MODEL, version: 2, tensors: weights(2) });
    await vi.waitFor(() => expect(seen).toEqual([1, 2]), EVENT);

    await kill(first);
    await vi.waitFor(() => expect(rollout.connected).toBe(false), EVENT);
    // Nobody listens on the socket: the request fails at once with the connection's code.
    await expect(rollout.status()).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    // The lease's memory is still mapped and readable; its release is a no-op now.
    expect((lease.tensor('w') as Float32Array)[7]).toBe(8);
    await expect(lease.release()).resolves.toBeUndefined();
    expect(rollout.closed).toBe(false);
    expect(trainer.closed).toBe(true);

    const second = await relay();
    // Two requests at once share one new connection.
    const [status] = await Promise.all([rollout.status(), rollout.status()]);
    expect(status.versions.map((v) => v.version)).toEqual([1, 2]);
    expect(rollout.reconnects).toBe(1);
    expect(rollout.connected).toBe(true);
    const again = await rollout.acquire({ model: MODEL, atLeast: 2 });
    expect((again.tensor('w') as Float32Array)[7]).toBe(9);
    await again.release();

    // The watch is back on its own (v2, already delivered, is not repeated) and sees v3.
    const next = await client(second);
    await publishVisible(next, { model: MODEL, version: 3, tensors: weights(3) });
    await vi.waitFor(() => expect(seen).toEqual([1, 2, 3]), EVENT);
    stop.abort();
    await watching;
    // The trainer's client (reconnect: false) stays closed although the relay is back.
    await expect(trainer.status()).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    expect(rollout.reconnects).toBe(1);
  });

  it('a watch waits out a relay that is away and ends at once when the client is closed', async () => {
    const r = await relay();
    const c = await client(r);
    const seen: number[] = [];
    const ended = (async () => {
      for await (const ev of c.watch({ model: MODEL, replay: true })) seen.push(ev.version);
      return seen;
    })();
    const publisher = await client(r);
    await publishVisible(publisher, { model: MODEL, version: 1, tensors: weights(1) });
    // Delivered before the relay goes: the watch's end below is then about the close alone.
    await vi.waitFor(() => expect(seen).toEqual([1]), EVENT);
    expect(c.connected).toBe(true);
    await kill(r);
    // Several rounds of the watch's backoff pass with no relay; the watch is still waiting.
    const early = await Promise.race([ended.then(() => 'ended'), new Promise((res) => setTimeout(() => res('waiting'), 1000))]);
    expect(early).toBe('waiting');
    c.close();
    // "At once": the close wakes the watch out of its backoff, and it ends on promise jobs alone,
    // before the event loop runs anything else (no timer, no I/O), however loaded the machine is.
    const nextTurn = new Promise((res) => setImmediate(() => res('after a turn of the event loop')));
    expect(await Promise.race([ended, nextTurn])).toEqual([1]);
    await expect(c.status()).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });

  it('a relay that accepts but never answers is unreachable (ERR_CLOSED), not a hang', async () => {
    const socketPath = `${tmp.dir}/stuck.sock`;
    const server = createServer(() => undefined);
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
    try {
      await expect(RelayClient.connect({ socketPath, connectTimeoutMs: 200 })).rejects.toMatchObject({
        code: 'ERR_CLOSED',
        message: expect.stringContaining('did not answer hello within 200 ms') as unknown,
      });
    } finally {
      server.close();
    }
  });

  it('a watch of a client without reconnection ends with its connection', async () => {
    const r = await relay();
    const publisher = await client(r);
    await publishVisible(publisher, { model: MODEL, version: 1, tensors: weights(1) });
    const c = await client(r, { reconnect: false });
    let delivered = 0;
    const ended = (async () => {
      // With replay, v1 arrives once the watch is subscribed: the kill below ends a live subscription.
      const watch = c.watch({ model: MODEL, replay: true });
      while (!(await watch.next()).done) delivered++;
      return 'ended';
    })();
    await vi.waitFor(() => expect(delivered).toBe(1), EVENT);
    await kill(r);
    expect(await ended).toBe('ended');
    expect(c.closed).toBe(true);
  });
});
