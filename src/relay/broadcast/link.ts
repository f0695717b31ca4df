/**
 * An authenticated connection to another relay (or a remote publisher): the handshake of both
 * sides, then typed messages. Nothing but the handshake is accepted before it succeeds.
 *
 * A link also notices a peer that went silent without closing: a host whose network dropped
 * sends no reset, so the transport reports nothing for minutes (TCP retransmits). Each side that
 * asks for it pings a peer it has not heard from lately; every link answers pings; a peer that
 * stays silent past the limit is dropped with ERR_PEER_SILENT, as if the transport had failed.
 */
import { LaminarError, ProtocolError, TimeoutError } from '../../common/errors.js';
import { watchdog } from '../../common/watchdog.js';
import type { Endpoint, IncomingMessage, Payload, UcxWorker } from '../../ucx/index.js';
import { assertRoutable, parseAddress } from '../../ucx/index.js';
import { checkProof, newNonce, proof } from './auth.js';
import { PEER_PROTOCOL_VERSION, decodePeerMessage, encodePeerMessage, type PeerMessage } from './messages.js';
import { ErrorCodes } from '../../common/error-codes.js';

export type PeerRole = 'relay' | 'publisher';

export type LinkMessageHandler = (message: PeerMessage, incoming: IncomingMessage) => void;

/** Why a peer was turned away or a link dropped; counted by the owner under `code`. */
export class PeerRefusedError extends LaminarError {}

/** Messages that arrive before the owner attaches its handler wait here (bounded). */
const MAX_EARLY_MESSAGES = 256;

/** How long a closing link waits for its last word (the error message saying why) to leave. */
const CLOSE_GRACE_MS = 1000;

/**
 * How often a quiet peer is pinged, as a share of the silence allowed (bounded both ways); also
 * how often a relay tells a sender it is still setting up an offered version.
 */
export const keepaliveIntervalFor = (silenceMs: number): number => Math.min(2000, Math.max(50, Math.floor(silenceMs / 4)));

export class PeerLink {
  private handler: LinkMessageHandler | undefined;
  private early: [PeerMessage, IncomingMessage][] = [];
  /** Called with the code of each message that had to be dropped (bad header, ...). */
  onBadMessage: ((code: string) => void) | undefined;
  /** The relay at the other end answers `chunk-query` (its welcome said so; connector side only). */
  chunkAdvice = false;
  /** The relay assembles versions published in parts (its welcome said so). */
  parts = false;

  private lastHeard = Date.now();

  /**
   * `silenceMs` (0: off) starts the keepalive: the peer is pinged when quiet, and dropped with
   * ERR_PEER_SILENT when nothing at all came from it for that long.
   */
  constructor(
    readonly endpoint: Endpoint,
    readonly peerId: string,
    readonly role: PeerRole,
    silenceMs = 0,
  ) {
    endpoint.onMessage = (incoming) => this.dispatch(incoming);
    if (silenceMs > 0) this.keepAlive(silenceMs);
  }

  private keepAlive(silenceMs: number): void {
    const interval = keepaliveIntervalFor(silenceMs);
    const dog = watchdog(interval, (heldUp) => {
      const now = Date.now();
      // Our own hold-up is not the peer's silence: its clock starts again (less an interval, so
      // that it is pinged at once).
      if (heldUp) this.lastHeard = Math.max(this.lastHeard, now - interval);
      const quiet = now - this.lastHeard;
      if (quiet > silenceMs) {
        this.endpoint.abort(new LaminarError(ErrorCodes.PEER_SILENT, `${this.peerId} sent nothing for ${quiet} ms, not even an answer to a ping`));
      } else if (quiet >= interval) {
        void this.send({ t: 'ping' }).catch(() => undefined);
      }
    });
    this.endpoint.onClose(() => dog.stop());
  }

  /** Attaches the message handler; messages that came first are delivered now, in order. */
  setHandler(handler: LinkMessageHandler): void {
    this.handler = handler;
    const early = this.early;
    this.early = [];
    for (const [message, incoming] of early) handler(message, incoming);
  }

  get closed(): boolean {
    return this.endpoint.closed;
  }

  send(message: PeerMessage, payload?: Payload): Promise<void> {
    return this.endpoint.send(encodePeerMessage(message), payload);
  }

  /**
   * Says why in an error message, then closes. The message is best effort: over a link that went
   * dark it never leaves, so the close comes after `graceMs` at the latest. A completed send means
   * UCX took the message, not that it left: the close flushes it out (within the same grace), since
   * a forced close at once dropped it most of the time on a loaded machine, and the peer then took
   * a retarget for this relay's failure.
   */
  async closeWith(code: string, message: string, graceMs = CLOSE_GRACE_MS): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
    const said = this.send({ t: 'error', code, message })
      .catch(() => undefined)
      .then(() => this.endpoint.close(false));
    await Promise.race([said, grace]);
    clearTimeout(timer);
    // Closed by the flush already, or cut short now (a forced close ends a graceful one in flight).
    await this.endpoint.close(true);
  }

  close(): Promise<void> {
    return this.endpoint.close(true);
  }

  private dispatch(incoming: IncomingMessage): void {
    this.lastHeard = Date.now();
    let message: PeerMessage;
    try {
      message = decodePeerMessage(incoming.header);
    } catch (err) {
      incoming.release();
      this.onBadMessage?.((err as LaminarError).code);
      // Garbage from an authenticated peer means it is broken: drop the link, keep the relay.
      void this.closeWith((err as LaminarError).code, (err as Error).message);
      return;
    }
    if (message.t === 'ping' || message.t === 'pong') {
      incoming.release();
      if (message.t === 'ping') void this.send({ t: 'pong' }).catch(() => undefined);
      return;
    }
    if (this.handler !== undefined) {
      this.handler(message, incoming);
    } else if (this.early.length < MAX_EARLY_MESSAGES) {
      this.early.push([message, incoming]);
    } else {
      incoming.release();
      this.onBadMessage?.(ErrorCodes.PEER_FLOOD);
    }
  }
}

/**
 * Waits for the next message on an endpoint during the handshake (the handshake's deadline
 * bounds the wait). The promise is marked handled: the caller may fail on a send before it
 * awaits this.
 */
function nextMessage(endpoint: Endpoint): Promise<PeerMessage> {
  const promise = new Promise<PeerMessage>((resolve, reject) => {
    endpoint.onMessage = (incoming) => {
      endpoint.onMessage = undefined;
      incoming.release();
      try {
        resolve(decodePeerMessage(incoming.header));
      } catch (err) {
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on what decodePeerMessage threw, unchanged, as the rejection
        reject(err);
      }
    };
    endpoint.onClose((error) => {
      reject(error ?? new PeerRefusedError(ErrorCodes.PEER_CLOSED, `${endpoint.peer} closed the connection during the handshake`));
    });
  });
  promise.catch(() => undefined);
  return promise;
}

/**
 * Runs a handshake under one deadline for all its steps. Sends wait too, not only receives: to a
 * host that went dark even the first send never completes (the transport retries the connection
 * for minutes). At the deadline the endpoint is closed, which ends every pending step.
 */
async function withinDeadline<T>(endpoint: Endpoint, timeoutMs: number, expired: () => LaminarError, handshake: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(expired());
      void endpoint.close(true);
    }, timeoutMs);
  });
  try {
    return await Promise.race([handshake(), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

export interface ConnectOptions {
  selfId: string;
  role: PeerRole;
  secret: Buffer;
  epoch: number;
  /** The whole handshake must finish within this. */
  timeoutMs: number;
  /** Keepalive of the link (see PeerLink); 0 or absent: this side never pings. */
  silenceMs?: number;
}

/**
 * Connects to `peerId` at `address` and authenticates both ways. With `peerId` null, any relay
 * of the job is accepted there (it still has to prove it knows the secret).
 */
export async function connectPeer(worker: UcxWorker, peerId: string | null, address: string, options: ConnectOptions): Promise<PeerLink> {
  const { host, port } = parseAddress(address);
  // A peer routed through an interface the worker may not use would fail deep in UCX's
  // handshake with a bare reset or timeout: this says why, before trying (net-devices.ts).
  await assertRoutable(host, worker.netDevices);
  const endpoint = worker.connect(host, port);
  const expired = (): LaminarError => new TimeoutError(`no handshake with ${peerId ?? 'a relay'} at ${address} within ${options.timeoutMs} ms`);
  try {
    return await withinDeadline(endpoint, options.timeoutMs, expired, () => connectHandshake(endpoint, peerId, address, options));
  } catch (err) {
    void endpoint.close(true);
    throw err;
  }
}

async function connectHandshake(endpoint: Endpoint, peerId: string | null, address: string, options: ConnectOptions): Promise<PeerLink> {
  const myNonce = newNonce();
  const challengeP = nextMessage(endpoint);
  await endpoint.send(
    encodePeerMessage({ t: 'hello', p: PEER_PROTOCOL_VERSION, from: options.selfId, role: options.role, nonce: myNonce, epoch: options.epoch }),
  );
  const challenge = await challengeP;
  if (challenge.t === 'refuse') throw new PeerRefusedError(challenge.code, `${peerId} refused us: ${challenge.message}`);
  if (challenge.t !== 'challenge') throw new ProtocolError(ErrorCodes.PEER_HANDSHAKE, `expected a challenge, got ${challenge.t}`);
  if ((peerId !== null && challenge.id !== peerId) || !checkProof(options.secret, 'acceptor', myNonce, challenge.id, challenge.proof)) {
    throw new PeerRefusedError(ErrorCodes.PEER_AUTH, `the relay at ${address} is not ${peerId ?? 'a relay'} of this job (bad proof)`);
  }
  const welcomeP = nextMessage(endpoint);
  await endpoint.send(encodePeerMessage({ t: 'auth', proof: proof(options.secret, 'connector', challenge.nonce, options.selfId) }));
  const welcome = await welcomeP;
  if (welcome.t === 'refuse') throw new PeerRefusedError(welcome.code, `${peerId} refused us: ${welcome.message}`);
  if (welcome.t !== 'welcome') throw new ProtocolError(ErrorCodes.PEER_HANDSHAKE, `expected welcome, got ${welcome.t}`);
  const link = new PeerLink(endpoint, challenge.id, 'relay', options.silenceMs);
  link.chunkAdvice = welcome.chunkAdvice === true;
  link.parts = welcome.parts === true;
  return link;
}

export interface AcceptOptions {
  selfId: string;
  secret: Buffer;
  /** The whole handshake must finish within this. */
  timeoutMs: number;
  /** Keepalive of links from relays (see PeerLink); 0 or absent: this side never pings. */
  silenceMs?: number;
  /** Null to admit the peer, or a refusal [code, message]. Checked after authentication. */
  admit(peerId: string, role: PeerRole, epoch: number): [string, string] | null;
}

/** Runs the acceptor side of the handshake on a fresh endpoint, within `timeoutMs` in all. */
export async function acceptPeer(endpoint: Endpoint, options: AcceptOptions): Promise<PeerLink> {
  const expired = (): LaminarError => new PeerRefusedError(ErrorCodes.PEER_HANDSHAKE, `no handshake from ${endpoint.peer} within ${options.timeoutMs} ms`);
  try {
    return await withinDeadline(endpoint, options.timeoutMs, expired, () => acceptHandshake(endpoint, options));
  } catch (err) {
    void endpoint.close(true);
    throw err;
  }
}

async function acceptHandshake(endpoint: Endpoint, options: AcceptOptions): Promise<PeerLink> {
  const refuse = async (code: string, message: string): Promise<never> => {
    await endpoint.send(encodePeerMessage({ t: 'refuse', code, message })).catch(() => undefined);
    throw new PeerRefusedError(code, message);
  };
  let hello: PeerMessage;
  try {
    hello = await nextMessage(endpoint);
  } catch (err) {
    throw err instanceof LaminarError ? err : new PeerRefusedError(ErrorCodes.PEER_HANDSHAKE, (err as Error).message);
  }
  if (hello.t !== 'hello') return refuse(ErrorCodes.PEER_HANDSHAKE, `expected hello, got ${hello.t}`);
  if (hello.p !== PEER_PROTOCOL_VERSION) return refuse(ErrorCodes.PROTOCOL_VERSION, `peer protocol ${hello.p}, this relay speaks ${PEER_PROTOCOL_VERSION}`);
  const myNonce = newNonce();
  const authP = nextMessage(endpoint);
  await endpoint.send(
    encodePeerMessage({ t: 'challenge', id: options.selfId, nonce: myNonce, proof: proof(options.secret, 'acceptor', hello.nonce, options.selfId) }),
  );
  let auth: PeerMessage;
  try {
    auth = await authP;
  } catch (err) {
    throw new PeerRefusedError(ErrorCodes.PEER_HANDSHAKE, (err as Error).message);
  }
  if (auth.t !== 'auth' || !checkProof(options.secret, 'connector', myNonce, hello.from, auth.proof)) {
    return refuse(ErrorCodes.PEER_AUTH, 'authentication failed (wrong job secret?)');
  }
  const refusal = options.admit(hello.from, hello.role, hello.epoch);
  if (refusal !== null) return refuse(refusal[0], refusal[1]);
  // The link exists before the welcome leaves, so that nothing the peer sends next is lost.
  // Relays are held to the keepalive; a publisher is only answered: between its pushes it may
  // sit idle for long, busy with training, and dropping it would gain nothing.
  const link = new PeerLink(endpoint, hello.from, hello.role, hello.role === 'relay' ? options.silenceMs : 0);
  await endpoint.send(encodePeerMessage({ t: 'welcome', epoch: hello.epoch, chunkAdvice: true, parts: true }));
  return link;
}
