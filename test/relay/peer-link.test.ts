/**
 * The peer link's own fault detection on loopback: the keepalive that tells a dead-quiet peer
 * (a link that went dark sends no reset) from an idle one, and the handshake's deadline.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { acceptPeer, connectPeer, type PeerLink, type PeerRole } from '../../src/relay/broadcast/link.js';
import { PEER_PROTOCOL_VERSION, encodePeerMessage } from '../../src/relay/broadcast/messages.js';
import { Workers, outcome, sleep, whenClosed, withTimeout } from '../helpers/ucx.js';

const SECRET = Buffer.from('peer-link-test-secret-0123456789');
const SILENCE_MS = 300;
/**
 * How long a test waits for a drop before calling it a hang. Not the bound under test: the
 * keepalive restarts a peer's clock whenever this process's own loop was held up, so on a loaded
 * machine a drop takes as many silence periods as it takes to see one unbroken; 10 x 300 ms was
 * too short there.
 */
const HANG_MS = 30_000;

describe('peer link', () => {
  const workers = new Workers();
  afterEach(() => workers.closeAll());

  /** A connected, authenticated pair; `silence` per side (0: that side never pings). */
  async function pair(role: PeerRole, silence: { connector: number; acceptor: number }): Promise<{ connector: PeerLink; acceptor: PeerLink }> {
    const server = workers.create();
    const client = workers.create();
    let accepted!: Promise<PeerLink>;
    const listener = server.listen('127.0.0.1', 0, (endpoint) => {
      accepted = acceptPeer(endpoint, { selfId: 'b', secret: SECRET, timeoutMs: 5000, silenceMs: silence.acceptor, admit: () => null });
    });
    const connector = await connectPeer(client, 'b', `127.0.0.1:${listener.port}`, {
      selfId: 'a',
      role,
      secret: SECRET,
      epoch: 1,
      timeoutMs: 5000,
      silenceMs: silence.connector,
    });
    return { connector, acceptor: await accepted };
  }

  /** Counts what arrives on a link (pings and pongs included); `received()` waits for the n-th. */
  function counted(link: PeerLink): { received(n: number): Promise<void> } {
    const deliver = link.endpoint.onMessage!;
    let count = 0;
    const waiters: { n: number; resolve(): void }[] = [];
    link.endpoint.onMessage = (message) => {
      count++;
      for (const w of waiters.filter((w) => w.n <= count)) w.resolve();
      deliver(message);
    };
    return { received: (n) => (count >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }))) };
  }

  /** Makes a link deaf and mute: it still holds its connection, but answers nothing. */
  function silence(link: PeerLink): void {
    link.endpoint.onMessage = (message) => message.release();
  }

  it('keeps an idle link up far past the silence limit: pings are answered', async () => {
    const { connector, acceptor } = await pair('relay', { connector: SILENCE_MS, acceptor: SILENCE_MS });
    // Decided on the keepalive's own traffic, not on the clock: each side pings every quarter of
    // the silence allowed when idle, so 24 messages each way are several silence periods of
    // pinging (however long a loaded machine takes for them), and the link must have stayed up.
    await withTimeout(Promise.all([counted(connector).received(24), counted(acceptor).received(24)]), HANG_MS, 'pings and answers');
    await sleep(SILENCE_MS + 100);
    expect(connector.closed).toBe(false);
    expect(acceptor.closed).toBe(false);
    // And messages still flow both ways after all that pinging.
    const got = new Promise((resolve) => acceptor.setHandler((message, incoming) => resolve((incoming.release(), message))));
    await connector.send({ t: 'error', code: 'ERR_INTERNAL', message: 'still there?' });
    await expect(withTimeout(got, 5000, 'the message')).resolves.toMatchObject({ t: 'error', code: 'ERR_INTERNAL' });
  });

  it('does not blame the peer for its own event loop being held up', async () => {
    const { connector, acceptor } = await pair('relay', { connector: SILENCE_MS, acceptor: SILENCE_MS });
    await sleep(SILENCE_MS);
    // A long synchronous stretch (both sides share this thread): the pings and answers of that
    // time wait unread while the keepalive timers are due.
    const until = Date.now() + 4 * SILENCE_MS;
    while (Date.now() < until) {
      // busy
    }
    await sleep(4 * SILENCE_MS);
    expect(connector.closed).toBe(false);
    expect(acceptor.closed).toBe(false);
  });

  // (A silenced side keeps no keepalive of its own: deaf, it would hear nothing and drop the link itself.)
  it('drops a peer that answers nothing with ERR_PEER_SILENT, on both sides of a relay link', async () => {
    const { connector, acceptor } = await pair('relay', { connector: SILENCE_MS, acceptor: 0 });
    silence(acceptor);
    const closed = whenClosed(connector.endpoint);
    const error = await withTimeout(closed, HANG_MS, 'the silent peer to be dropped');
    expect(error?.code).toBe('ERR_PEER_SILENT');
    // A send on the dropped link fails with the same reason instead of hanging.
    expect(await outcome(connector.send({ t: 'ping' }))).toBe('ERR_PEER_SILENT');

    const other = await pair('relay', { connector: 0, acceptor: SILENCE_MS });
    silence(other.connector);
    expect((await withTimeout(whenClosed(other.acceptor.endpoint), HANG_MS, 'the silent connector to be dropped'))?.code).toBe('ERR_PEER_SILENT');
  });

  it('never drops a publisher for silence (it may be busy training between pushes), but answers its pings', async () => {
    const { connector, acceptor } = await pair('publisher', { connector: 0, acceptor: SILENCE_MS });
    silence(connector);

    // The publisher does hold the relay to the keepalive. This drop, of a link silenced after the
    // publisher went quiet, is the measure of "long enough": a relay's acceptor that held a
    // publisher to the same limit would have dropped it by then (and the six periods on top).
    const other = await pair('publisher', { connector: SILENCE_MS, acceptor: 0 });
    silence(other.acceptor);
    const [dropped] = await Promise.all([withTimeout(whenClosed(other.connector.endpoint), HANG_MS, 'the silent relay to be dropped'), sleep(6 * SILENCE_MS)]);
    expect(dropped?.code).toBe('ERR_PEER_SILENT');
    expect(acceptor.closed).toBe(false);
  });

  it('says why before closing a link on purpose', async () => {
    // No keepalive here (this is not about silence: on a loaded machine a 300 ms limit could drop
    // the link first), and a grace as long as the test waits: on a healthy link the reason's send
    // completes, and the close follows that event rather than the 1 s a dark link is given.
    const { connector, acceptor } = await pair('relay', { connector: 0, acceptor: 0 });
    const said = new Promise((resolve) => acceptor.setHandler((message, incoming) => resolve((incoming.release(), message))));
    const closed = whenClosed(acceptor.endpoint);
    await connector.closeWith('ERR_RETARGETED', 'plan changed', HANG_MS);
    expect(connector.closed).toBe(true);
    await expect(withTimeout(said, HANG_MS, 'the reason')).resolves.toEqual({ t: 'error', code: 'ERR_RETARGETED', message: 'plan changed' });
    await withTimeout(closed, HANG_MS, 'the close to reach the peer');
  });

  it('fails a handshake the other side never answers within its deadline, on either side', async () => {
    const server = workers.create();
    const client = workers.create();
    const mute = server.listen('127.0.0.1', 0, (endpoint) => {
      endpoint.onMessage = (message) => message.release();
    });
    const started = Date.now();
    const attempt = connectPeer(client, null, `127.0.0.1:${mute.port}`, { selfId: 'a', role: 'relay', secret: SECRET, epoch: 1, timeoutMs: 500 });
    await expect(attempt).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(450);
    await expect.poll(() => client.stats().tracked, { timeout: HANG_MS }).toBe(0);

    // A connector that says hello and then nothing more is turned away by the acceptor's deadline.
    let accepting!: Promise<string>;
    const listener = server.listen('127.0.0.1', 0, (endpoint) => {
      accepting = outcome(acceptPeer(endpoint, { selfId: 'b', secret: SECRET, timeoutMs: 300, admit: () => null }));
    });
    const quiet = client.connect('127.0.0.1', listener.port);
    quiet.onMessage = (message) => message.release();
    await quiet.send(encodePeerMessage({ t: 'hello', p: PEER_PROTOCOL_VERSION, from: 'a', role: 'relay', nonce: Buffer.alloc(16, 3), epoch: 1 }));
    await expect.poll(() => (accepting as Promise<string> | undefined) !== undefined, { timeout: HANG_MS }).toBe(true);
    expect(await withTimeout(accepting, HANG_MS, 'the acceptor to give up')).toBe('ERR_PEER_HANDSHAKE');
  });
});
