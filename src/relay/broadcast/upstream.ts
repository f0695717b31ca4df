/**
 * The relay's upstream side of the broadcast: it accepts authenticated peers (relays of the
 * plan, remote publishers), takes their offers and receives chunks straight into a new segment,
 * verifying each one; a version arriving is forwarded downstream while it arrives. Separate
 * from the downstream side (downstream.ts): the receiving state (arrivals, offers being set up,
 * the links of upstream peers) is its own, and the broadcaster only asks it what is arriving.
 */
import type { Logger } from 'pino';
import { MAX_HEADER_BYTES } from '../../safetensors/header.js';
import type { Mapping } from '../../native/index.js';
import type { Endpoint, IncomingMessage } from '../../ucx/index.js';
import type { BroadcastStatus } from '../protocol/status.js';
import { parseOffered, type OfferedVersion, type StoredVersion, type VersionStore } from '../store.js';
import type { BroadcasterOptions } from './options.js';
import { GOODBYE } from './downstream.js';
import { checkPushedAdapter } from '../lora/adapter-check.js';
import { IncomingTransfer, PullLane, type ArrivalBase } from './incoming.js';
import { baseFingerprint, findBase } from './delta/base.js';
import { maxSparsePayloadBytes } from '../delta/codec.js';
import { acceptPeer, keepaliveIntervalFor, type PeerLink, type PeerRole } from './link.js';
import type { PeerMessage, PeerMessageOf } from './messages.js';
import type { BroadcastMetrics } from './metrics.js';
import { transferKey } from './outgoing.js';
import { positionOf, type ChainPlan } from './plan.js';
import type { MappingRegistrations } from './registrations.js';
import type { ChunkSource } from './source.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { settledOrDelay } from '../../common/concurrency.js';
import { inBackground } from '../background.js';
import { PartAssembler } from '../parts/assembly.js';

/** The longest an offer waits for the version before it to complete here (earlierCompletions). */
const COMPLETION_WAIT_MS = 5_000;

interface Arrival {
  transfer: IncomingTransfer;
  upstreams: Set<PeerLink>;
}

/** What the upstream side needs of the broadcaster around it. */
export interface UpstreamContext {
  store: VersionStore;
  options: BroadcasterOptions;
  metrics: BroadcastMetrics;
  log: Logger;
  registrations: MappingRegistrations;
  plan(): ChainPlan | null;
  closed(): boolean;
  /** Sends a version on downstream (while it arrives here). */
  forward(source: ChunkSource): void;
}

/** Versions remembered per upstream link as offered there (UpstreamSide.offeredOn). */
const OFFERS_REMEMBERED = 64;

export class UpstreamSide {
  private readonly arrivals = new Map<string, Arrival>();
  private readonly offersInProgress = new Set<string>();
  /** Offered versions whose segment is being set up (accepted already, or about to be). */
  private readonly settingUp = new Map<string, { model: string; version: number; chunks: number }>();
  private readonly upstreams = new Set<PeerLink>();
  private readonly lanes = new WeakMap<PeerLink, PullLane>();
  /**
   * The versions last offered on each upstream link (at most OFFERS_REMEMBERED): a chunk for one
   * whose transfer has ended was on its way, not a peer's mistake (handleChunk).
   */
  private readonly offeredOn = new WeakMap<PeerLink, Set<string>>();
  /** Upstream links whose sender said it was leaving (retarget, shutdown): their close is no failure. */
  private readonly leftOnPurpose = new WeakSet<PeerLink>();
  private readonly store: VersionStore;
  private readonly options: BroadcasterOptions;
  private readonly metrics: BroadcastMetrics;
  private readonly log: Logger;
  /** Versions published in parts, from several publishers at once (relay/parts/). */
  private readonly parts: PartAssembler;

  constructor(private readonly ctx: UpstreamContext) {
    this.store = ctx.store;
    this.options = ctx.options;
    this.metrics = ctx.metrics;
    this.log = ctx.log;
    this.failures = { failures: ctx.metrics.backgroundFailures };
    this.parts = new PartAssembler({
      store: ctx.store,
      metrics: ctx.metrics,
      log: ctx.log,
      registrations: ctx.registrations,
      partialTtlMs: ctx.options.partialTtlMs,
    });
  }

  private readonly failures: { failures: BroadcastMetrics['backgroundFailures'] };

  /** Authenticates a peer that connected to the listener, and takes it on. */
  accept(endpoint: Endpoint): void {
    acceptPeer(endpoint, {
      selfId: this.options.relayId,
      secret: this.options.secret,
      timeoutMs: this.options.handshakeTimeoutMs,
      silenceMs: this.options.stallMs,
      admit: (peerId, role, epoch) => this.admit(peerId, role, epoch),
    }).then(
      (link) => this.upstreamJoined(link),
      (reason: unknown) => {
        const err = reason as Error & { code?: string };
        // The relay stopping cuts handshakes short (ERR_UCX_CLOSED): nobody was refused.
        if (this.ctx.closed()) {
          this.log.debug({ peer: endpoint.peer, code: err.code }, 'handshake cut short: the relay is stopping');
          return;
        }
        this.metrics.refusedPeers.inc({ code: err.code ?? ErrorCodes.PEER_HANDSHAKE });
        this.log.warn({ peer: endpoint.peer, code: err.code, err: err.message }, 'peer refused');
      },
    );
  }

  /** The upstream part of the broadcaster's status. */
  status(): Pick<BroadcastStatus, 'upstreams' | 'receiving'> {
    return {
      upstreams: [...this.upstreams].map((l) => ({ id: l.peerId, role: l.role })),
      receiving: [
        ...[...this.settingUp.values()].map((p) => ({ ...p, hwm: 0, settingUp: true })),
        ...[...this.arrivals.entries()]
          .filter(([k]) => !this.settingUp.has(k))
          .map(([, { transfer: t }]) => ({ model: t.model, version: t.version, hwm: t.hwm, chunks: t.chunkCount })),
      ],
    };
  }

  /** Versions arriving here (each a source to forward from while it arrives). */
  arriving(): ChunkSource[] {
    return [...this.arrivals.values()].map(({ transfer }) => transfer);
  }

  /** True while a version is arriving here. */
  get busy(): boolean {
    return this.arrivals.size > 0 || this.parts.busy;
  }

  /** Abandons arrivals no upstream has sent anything for in `partialTtlMs`. */
  expireIdle(now: number): void {
    this.parts.tick(now);
    for (const { transfer } of this.arrivals.values()) {
      if (now - transfer.lastActivity > this.options.partialTtlMs) {
        inBackground(transfer.abandon(`no upstream sent anything for ${this.options.partialTtlMs} ms`), this.log, 'abandoning an idle arrival', this.failures);
      }
    }
  }

  /** A newer version is complete here: older partial arrivals of the model are pointless. */
  abandonOlderThan(v: StoredVersion): void {
    this.parts.abandonOlderThan(v);
    for (const { transfer } of [...this.arrivals.values()]) {
      if (transfer.model === v.model && transfer.version < v.version) {
        inBackground(transfer.abandon(`version ${v.version} is complete`), this.log, 'abandoning a superseded arrival', this.failures);
      }
    }
  }

  async close(): Promise<void> {
    this.parts.close();
    await Promise.all([...this.upstreams].map((l) => l.close()));
  }

  private admit(peerId: string, role: PeerRole, epoch: number): [string, string] | null {
    if (this.ctx.closed()) return [ErrorCodes.RELAY_STOPPING, 'the relay is stopping'];
    if (role === 'publisher') return null;
    const plan = this.ctx.plan();
    // A peer (authenticated with the job secret) that already follows a newer plan than ours:
    // the plan reaches us a moment later; refusing would only delay the new link by a retry.
    if (epoch > (plan?.epoch ?? 0)) return null;
    if (plan === null || positionOf(plan, peerId) < 0) {
      return [ErrorCodes.NOT_IN_PLAN, `relay ${peerId} is not in the chain plan (epoch ${plan?.epoch ?? 'none'})`];
    }
    return null;
  }

  private upstreamJoined(link: PeerLink): void {
    if (this.ctx.closed()) {
      void link.close();
      return;
    }
    this.upstreams.add(link);
    this.log.info({ peer: link.peerId, role: link.role, address: link.endpoint.peer }, 'upstream peer connected');
    link.onBadMessage = (code) => this.metrics.badMessages.inc({ code });
    link.endpoint.onClose((err) => {
      this.upstreams.delete(link);
      for (const arrival of this.arrivals.values()) arrival.upstreams.delete(link);
      this.parts.linkGone(link, err?.code);
      this.log.info({ peer: link.peerId, code: err?.code }, 'upstream peer gone');
      if (err && link.role === 'relay' && !this.ctx.closed() && !this.leftOnPurpose.has(link)) {
        this.metrics.upstreamFailures.inc({ reason: err.code });
        this.options.onPeerFailure?.(link.peerId, 'upstream', err.code);
      }
    });
    link.setHandler((message, incoming) => this.upstreamMessage(link, message, incoming));
  }

  private upstreamMessage(link: PeerLink, message: PeerMessage, incoming: IncomingMessage): void {
    switch (message.t) {
      case 'offer':
        // handleOffer declines what it cannot take; what escapes it is a bug: the link goes.
        inBackground(this.handleOffer(link, message, incoming), this.log, 'taking an offer', {
          ...this.failures,
          recover: (err) => void link.closeWith(ErrorCodes.INTERNAL, `the offer failed: ${(err as Error).message}`),
        });
        return;
      case 'part-offer':
        inBackground(this.parts.offer(link, message, incoming), this.log, 'taking a part offer', {
          ...this.failures,
          recover: (err) => void link.closeWith(ErrorCodes.INTERNAL, `the part offer failed: ${(err as Error).message}`),
        });
        return;
      case 'chunk':
        if (this.parts.chunk(link, message, incoming)) return;
        this.handleChunk(link, message, incoming);
        return;
      case 'chunk-query':
        incoming.release();
        // The push goes through the publisher first: the chain is one relay longer than ours.
        void link.send({ t: 'chunk-advice', size: message.size, chunkSize: this.store.chunkSizer.choose(message.size, 1) }).catch(() => undefined);
        return;
      case 'error':
        incoming.release();
        if (message.code === GOODBYE) {
          this.leftOnPurpose.add(link);
          this.log.info({ peer: link.peerId, reason: message.message }, 'upstream peer retargets');
          return;
        }
        this.log.warn({ peer: link.peerId, code: message.code, message: message.message }, 'upstream reported an error');
        return;
      default:
        incoming.release();
        this.reject(link, ErrorCodes.PEER_UNEXPECTED, `unexpected ${message.t} from upstream`);
    }
  }

  private rememberOffer(link: PeerLink, key: string): void {
    let offered = this.offeredOn.get(link);
    if (offered === undefined) {
      offered = new Set();
      this.offeredOn.set(link, offered);
    }
    offered.delete(key);
    offered.add(key);
    // A link is offered each version about once, and lives for many: the oldest goes first.
    if (offered.size > OFFERS_REMEMBERED) offered.delete(offered.values().next().value!);
  }

  /** Counts and answers a bad message; the link stays (the peer passed authentication). */
  private reject(link: PeerLink, code: string, message: string): void {
    this.metrics.badMessages.inc({ code });
    this.log.warn({ peer: link.peerId, code }, message);
    void link.send({ t: 'error', code, message }).catch(() => undefined);
  }

  private async handleOffer(link: PeerLink, offer: PeerMessageOf<'offer'>, incoming: IncomingMessage): Promise<void> {
    const k = transferKey(offer.model, offer.version);
    this.rememberOffer(link, k);
    const decline = (code: string, message: string): void => {
      incoming.release();
      void link.send({ t: 'decline', model: offer.model, version: offer.version, code, message }).catch(() => undefined);
    };
    const existing = this.arrivals.get(k);
    if (existing) {
      incoming.release();
      existing.upstreams.add(link);
      existing.transfer.setUpstream(link.endpoint.id);
      const { from, have, base } = existing.transfer.resumePoint();
      this.log.info({ peer: link.peerId, model: offer.model, version: offer.version, from }, 'resuming a transfer with a new upstream');
      void link.send({ t: 'accept', model: offer.model, version: offer.version, from, have, ...(base ? { base } : {}) }).catch(() => undefined);
      return;
    }
    const held = this.store.list().find((v) => v.model === offer.model && v.version === offer.version);
    if (held?.state === 'complete') {
      decline(ErrorCodes.VERSION_EXISTS, 'this relay already holds the version');
      void link.send({ t: 'progress', model: offer.model, version: offer.version, hwm: held.layout.chunkCount, complete: true }).catch(() => undefined);
      return;
    }
    const latest = this.store.latest(offer.model);
    if (latest !== null && latest.version > offer.version) {
      decline(ErrorCodes.VERSION_STALE, `this relay holds the newer version ${latest.version}`);
      return;
    }
    if (this.offersInProgress.has(k) || held) {
      decline(ErrorCodes.BUSY, 'the version is being set up from another offer; offer again');
      return;
    }
    if (offer.headerBytes !== incoming.length || offer.headerBytes > MAX_HEADER_BYTES + 8 || offer.headerBytes >= offer.size) {
      this.metrics.badMessages.inc({ code: ErrorCodes.PEER_BAD_OFFER });
      decline(ErrorCodes.PEER_BAD_OFFER, `header of ${incoming.length} bytes for ${offer.headerBytes} announced, version of ${offer.size}`);
      return;
    }
    this.offersInProgress.add(k);
    try {
      await this.earlierCompletions(offer.model, offer.version);
      const { v, offered, ready } = await this.reserve(link, offer, incoming, k);
      const base = this.baseFor(v);
      const transfer = new IncomingTransfer(this.store, v, offered.checksums, this.metrics, this.log, base, ready, offered.header);
      transfer.setUpstream(link.endpoint.id);
      const arrival: Arrival = { transfer, upstreams: new Set([link]) };
      this.arrivals.set(k, arrival);
      // Chunks are received straight into the segment (and forwarded from it while they arrive):
      // registered, an RDMA transport need not pin each chunk's pages. The writable mapping closes
      // when the version completes or is abandoned, and its registration must go with it: a
      // registration holds its memory, so one left behind would keep a whole version mapped.
      let receiving: Mapping | null = null;
      ready.then(
        () => {
          if (this.arrivals.get(k) !== arrival) return; // given up meanwhile: nothing to receive into
          receiving = v.mapping;
          if (receiving !== null) this.ctx.registrations.registerOnce(receiving);
        },
        (err: unknown) => this.setUpFailed(arrival, err as Error & { code?: string }),
      );
      const started = performance.now();
      const settled = transfer.done.then(
        () => {
          if (receiving !== null) this.ctx.registrations.release(receiving);
          this.metrics.transfers.inc({ direction: 'in', result: 'complete' });
          this.metrics.transferSeconds.observe({ direction: 'in' }, (performance.now() - started) / 1e3);
          this.arrivals.delete(k);
          for (const up of arrival.upstreams) {
            void up.send({ t: 'progress', model: v.model, version: v.version, hwm: v.layout.chunkCount, complete: true }).catch(() => undefined);
          }
        },
        () => {
          if (receiving !== null) this.ctx.registrations.release(receiving);
          this.metrics.transfers.inc({ direction: 'in', result: 'abandoned' });
          this.arrivals.delete(k);
        },
      );
      inBackground(settled, this.log, 'finishing an arrival', this.failures);
      this.log.info(
        { peer: link.peerId, model: v.model, version: v.version, size: v.layout.totalSize, chunks: v.layout.chunkCount, base: base?.ref.version ?? null },
        'receiving a version',
      );
      // Accepted, and offered on, while the segment is set up (ready): the setups of the relays
      // down the chain overlap instead of adding up, and deltas are kept for the successor as
      // they arrive. The chunks wait for the segment before they are written.
      await link.send({ t: 'accept', model: v.model, version: v.version, from: 0, have: [], ...(base ? { base: base.ref } : {}) });
      // Forward while receiving: the successor gets each chunk as soon as it is verified here.
      this.ctx.forward(transfer);
    } catch (err) {
      const code = (err as { code?: string }).code ?? ErrorCodes.INTERNAL;
      this.metrics.badMessages.inc({ code });
      this.log.warn({ peer: link.peerId, model: offer.model, version: offer.version, code, err: (err as Error).message }, 'offer declined');
      decline(code, (err as Error).message);
    } finally {
      this.offersInProgress.delete(k);
    }
  }

  /**
   * Settles once the arrivals of earlier versions of `model` that have every chunk here are
   * complete (or given up), for at most COMPLETION_WAIT_MS. Such a version is the base the
   * offered one's deltas need (delta/base.ts takes only complete versions), and its completion
   * (the segment sealed, the directory written) is a matter of milliseconds; but a relay in the
   * middle of the chain forwards each chunk as soon as it is verified, so its successor can
   * complete the version, and the trainer publish the next, before it has. Taken then, the offer
   * named no base, and the next version came in full chunks over this hop and the next (a clean
   * clone's loaded CI run saw half a version go full that way).
   */
  private async earlierCompletions(model: string, version: number): Promise<void> {
    const completing = [...this.arrivals.values()]
      .map(({ transfer }) => transfer)
      .filter((t) => t.model === model && t.version < version && t.allVerified && !t.complete);
    if (completing.length === 0) return;
    this.log.debug(
      { model, version, completing: completing.map((t) => t.version) },
      'the offer waits for the version before it to complete here: its delta base',
    );
    await settledOrDelay(Promise.allSettled(completing.map((t) => t.done)), COMPLETION_WAIT_MS);
  }

  /**
   * The version an arrival of `v` may be rebuilt from (delta/base.ts): named in the accept, so
   * that a sender holding the same may send deltas against it; null (full chunks) when this relay
   * holds none of the same layout or takes no deltas (--delta off).
   */
  private baseFor(v: StoredVersion): ArrivalBase | null {
    if (this.options.delta === 'off') return null;
    const base = findBase(this.store, v.model, v.version, v.layout);
    const digest = base && baseFingerprint(base);
    return base && digest ? { v: base, ref: { version: base.version, digest } } : null;
  }

  /**
   * Takes the offered header and reserves the version (store.reserveReceive): its segment is set
   * up in the background (`ready`). That (every page allocated, unless a spare is taken) can
   * outlast the sender's stall limit, which runs from its offer on and again for each chunk it
   * sends: most of a minute for a 145 GB model on 4 KiB pages. Until it is ready a progress
   * message with nothing received tells the sender that we are at it, and our status (so the
   * manager's stall watch too) shows the setup.
   */
  private async reserve(
    link: PeerLink,
    offer: PeerMessageOf<'offer'>,
    incoming: IncomingMessage,
    k: string,
  ): Promise<{ v: StoredVersion; offered: OfferedVersion; ready: Promise<void> }> {
    const beat = setInterval(
      () => void link.send({ t: 'progress', model: offer.model, version: offer.version, hwm: 0, complete: false }).catch(() => undefined),
      keepaliveIntervalFor(this.options.stallMs),
    );
    try {
      const header = Buffer.allocUnsafe(offer.headerBytes);
      await incoming.receiveInto(header, 0);
      const offered = parseOffered(header, offer.size, { model: offer.model, version: offer.version });
      // A push from a trainer host: an adapter is checked here, where it is published (relays
      // down the chain trust the checksums). Refused with its code before anything is allocated.
      if (link.role === 'publisher') {
        checkPushedAdapter({ ...offered, specs: offered.layout.tensors }, (model, version) => this.store.findBase(model, version));
      }
      const { v, ready } = this.store.reserveReceive(offered);
      this.settingUp.set(k, { model: offered.model, version: offered.version, chunks: offered.layout.chunkCount });
      const setUp = (): void => {
        clearInterval(beat);
        this.settingUp.delete(k);
      };
      ready.then(setUp, setUp);
      return { v, offered, ready };
    } catch (err) {
      clearInterval(beat);
      throw err;
    }
  }

  /**
   * The segment of a version accepted from upstream could not be set up (the shm directory
   * full, the file system's error): every upstream is told with a decline carrying the code,
   * as if the offer had been declined, and the arrival is given up (nothing of it is served;
   * a successor it was offered on sees the transfer abandoned).
   */
  private setUpFailed(arrival: Arrival, err: Error & { code?: string }): void {
    const { transfer } = arrival;
    const code = err.code ?? ErrorCodes.INTERNAL;
    this.metrics.badMessages.inc({ code });
    this.log.warn(
      { model: transfer.model, version: transfer.version, code, err: err.message },
      'the segment of an accepted version could not be set up: declined',
    );
    for (const up of arrival.upstreams) {
      void up.send({ t: 'decline', model: transfer.model, version: transfer.version, code, message: err.message }).catch(() => undefined);
    }
    inBackground(transfer.abandon(`its segment could not be set up: ${err.message}`), this.log, 'abandoning an arrival without a segment', this.failures);
  }

  private handleChunk(link: PeerLink, chunk: PeerMessageOf<'chunk'>, incoming: IncomingMessage): void {
    const k = transferKey(chunk.model, chunk.version);
    const arrival = this.arrivals.get(k);
    if (arrival === undefined) {
      incoming.release();
      if (this.offeredOn.get(link)?.has(k)) {
        // Offered here, and its transfer ended since: completed (from a second upstream after a
        // retarget, say, or before a resend arrived) or given up. The sender learns it from the
        // progress or decline already on its way; the chunk is no fault of its.
        this.metrics.lateChunks.inc();
        this.log.debug({ peer: link.peerId, model: chunk.model, version: chunk.version, index: chunk.index }, 'a chunk after its transfer ended: released');
        return;
      }
      this.reject(link, ErrorCodes.UNKNOWN_TRANSFER, `chunk ${chunk.index} of ${chunk.model} v${chunk.version}, which was not offered`);
      return;
    }
    const { transfer } = arrival;
    if (chunk.index >= transfer.chunkCount) {
      incoming.release();
      this.reject(link, ErrorCodes.CHUNK_OUT_OF_RANGE, `chunk ${chunk.index} of a version with ${transfer.chunkCount} chunks`);
      return;
    }
    const expected = Math.min(transfer.layout.chunkSize, transfer.layout.dataLength - chunk.index * transfer.layout.chunkSize);
    if (chunk.enc !== undefined && transfer.base === null) {
      incoming.release();
      this.reject(link, ErrorCodes.PEER_UNEXPECTED, `a delta of chunk ${chunk.index} of ${chunk.model} v${chunk.version}, received without a base`);
      return;
    }
    const bad = badChunkLength(chunk.enc, incoming, expected);
    if (bad !== null) {
      incoming.release();
      this.reject(link, ErrorCodes.CHUNK_LENGTH, `chunk ${chunk.index} ${bad}`);
      return;
    }
    let lane = this.lanes.get(link);
    if (lane === undefined) {
      lane = new PullLane();
      this.lanes.set(link, lane);
    }
    const receiving = transfer.receive(chunk.index, incoming, link.endpoint.id, lane, chunk.enc).then((outcome) => {
      if (outcome === 'corrupt' || outcome === 'failed') {
        void link.send({ t: 'nack', model: chunk.model, version: chunk.version, index: chunk.index }).catch(() => undefined);
      }
    });
    // receive() settles chunk failures as outcomes; it rejects only when completing the version
    // failed and abandoning it failed too.
    inBackground(receiving, this.log, 'receiving a chunk', this.failures);
  }
}

/**
 * Why a chunk message's payload cannot be chunk `expected` bytes long as its encoding says, or
 * null when it can: a full chunk comes by rendezvous, whole; 'same' carries nothing; 'sparse'
 * carries a delta no longer than the codec's bound for the chunk.
 */
function badChunkLength(enc: 'same' | 'sparse' | undefined, incoming: IncomingMessage, expected: number): string | null {
  if (incoming.dropped) return `carries ${incoming.length} bytes that were dropped`;
  if (enc === undefined) {
    return incoming.length === expected && incoming.data === undefined ? null : `carries ${incoming.length} bytes, expected ${expected} by rendezvous`;
  }
  if (enc === 'same') return incoming.length === 0 ? null : `is the base's but carries ${incoming.length} bytes`;
  const limit = maxSparsePayloadBytes(expected);
  return incoming.length > 0 && incoming.length <= limit ? null : `carries a delta of ${incoming.length} bytes, at most ${limit} for a chunk of ${expected}`;
}
