/**
 * The relay's part in the chain-pipelined broadcast.
 *
 * Downstream: the relay sends every version it holds or is receiving (the newest of each model)
 * to its successor in the plan, forwarding each chunk as soon as it is verified here. When the
 * successor dies or stalls, the relay skips to the next relay in the plan, which resumes from
 * its own high-water mark; skipped relays are retried and taken back when they answer again.
 *
 * Upstream: it accepts authenticated peers (relays of the plan, remote publishers), takes their
 * offers and receives chunks straight into a new segment, verifying each one.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { LaminarError } from '../../common/errors.js';
import { MAX_HEADER_BYTES } from '../../safetensors/header.js';
import type { Mapping } from '../../native/index.js';
import { UcxWorker, assertAddressUp, type IncomingMessage, type Listener, type Registration } from '../../ucx/index.js';
import type { BroadcastOptions } from '../options.js';
import { parseOffered, type OfferedVersion, type StoredVersion, type VersionStore } from '../store.js';
import { IncomingTransfer, PullLane } from './incoming.js';
import { PeerRefusedError, acceptPeer, connectPeer, keepaliveIntervalFor, type PeerLink, type PeerRole } from './link.js';
import type { PeerMessage, PeerMessageOf } from './messages.js';
import { BroadcastMetrics } from './metrics.js';
import { OutgoingTransfer, transferKey } from './outgoing.js';
import { downstreamOf, positionOf, type ChainMember, type ChainPlan } from './plan.js';
import { StoredSource, type ChunkSource } from './source.js';

export interface BroadcasterOptions extends BroadcastOptions {
  relayId: string;
  logger: Logger;
  registry: Registry;
  /** Told of every transport failure with a neighbour (the control plane reports it to the manager). */
  onPeerFailure?: (peerId: string, direction: 'downstream' | 'upstream', code: string) => void;
}

interface Downstream {
  member: ChainMember;
  link: PeerLink;
  sessions: Map<string, OutgoingTransfer>;
}

interface Arrival {
  transfer: IncomingTransfer;
  upstreams: Set<PeerLink>;
}

/** The code of the 'error' message a relay sends before closing a downstream link on purpose. */
const GOODBYE = 'ERR_RETARGETED';

export interface BroadcastStatus {
  relayId: string;
  epoch: number | null;
  position: number;
  port: number | null;
  downstream: { id: string; address: string; sending: { model: string; version: number; chunksSent: number }[] } | null;
  upstreams: { id: string; role: PeerRole }[];
  /** Versions arriving; `settingUp`: its segment is being allocated, the offer not yet accepted. */
  receiving: { model: string; version: number; hwm: number; chunks: number; settingUp?: boolean }[];
  skipped: string[];
}

export class Broadcaster {
  readonly metrics: BroadcastMetrics;
  private readonly worker: UcxWorker;
  private listener: Listener | null = null;
  private plan: ChainPlan | null;
  private downstream: Downstream | null = null;
  private connecting = false;
  private readonly cooldown = new Map<string, number>();
  /** Relays whose unreachability was already logged at warn (once until they answer again). */
  private readonly unreachableLogged = new Set<string>();
  private readonly arrivals = new Map<string, Arrival>();
  private readonly offersInProgress = new Set<string>();
  /** Offered versions whose segment is being allocated, before the offer is accepted. */
  private readonly settingUp = new Map<string, { model: string; version: number; chunks: number }>();
  private readonly upstreams = new Set<PeerLink>();
  private readonly lanes = new WeakMap<PeerLink, PullLane>();
  /** Upstream links whose sender said it was leaving (retarget, shutdown): their close is no failure. */
  private readonly leftOnPurpose = new WeakSet<PeerLink>();
  private readonly registrations = new Map<Mapping, Registration>();
  private readonly timer: NodeJS.Timeout;
  private readonly log: Logger;
  private closed = false;
  private readonly onComplete = (v: StoredVersion): void => this.versionComplete(v);
  private readonly onRetired = (v: StoredVersion): void => this.versionRetired(v);

  private constructor(
    private readonly store: VersionStore,
    private readonly options: BroadcasterOptions,
  ) {
    this.log = options.logger.child({ component: 'broadcast' });
    this.worker = new UcxWorker({
      onStray: () => this.metrics.badMessages.inc({ code: 'ERR_PEER_STRAY' }),
    });
    this.metrics = new BroadcastMetrics(options.registry, () => (this.closed ? 0 : this.worker.stats().registrations));
    this.plan = options.plan;
    if (this.plan) this.metrics.epoch.set(this.plan.epoch);
    store.on('complete', this.onComplete);
    store.on('retired', this.onRetired);
    this.timer = setInterval(() => this.tick(), Math.max(50, Math.min(options.retryMs, 1000)));
    this.timer.unref();
  }

  /**
   * Creates the broadcaster, binds its listener (waiting up to `listenWaitMs` for the port to be
   * free again, as after a crash) and starts sending downstream.
   */
  static async start(store: VersionStore, options: BroadcasterOptions, listenWaitMs = 30_000): Promise<Broadcaster> {
    // Before the UCX context exists: it takes the interfaces that are up now, for good.
    if (options.listen) assertAddressUp(options.listen.host);
    const broadcaster = new Broadcaster(store, options);
    try {
      const deadline = Date.now() + listenWaitMs;
      for (;;) {
        try {
          broadcaster.bind();
          break;
        } catch (err) {
          if ((err as LaminarError).code !== 'UCS_ERR_BUSY' || Date.now() > deadline) throw err;
          broadcaster.log.warn({ listen: options.listen }, 'the broadcast port is still in use: retrying');
          await new Promise((r) => setTimeout(r, 500));
        }
      }
    } catch (err) {
      await broadcaster.close();
      throw err;
    }
    broadcaster.ensureDownstream();
    return broadcaster;
  }

  private bind(): void {
    const options = this.options;
    if (options.listen) {
      this.listener = this.worker.listen(options.listen.host, options.listen.port, (endpoint) => {
        acceptPeer(endpoint, {
          selfId: options.relayId,
          secret: options.secret,
          timeoutMs: options.handshakeTimeoutMs,
          silenceMs: options.stallMs,
          admit: (peerId, role, epoch) => this.admit(peerId, role, epoch),
        }).then(
          (link) => this.upstreamJoined(link),
          (err: LaminarError) => {
            this.metrics.refusedPeers.inc({ code: err.code ?? 'ERR_PEER_HANDSHAKE' });
            this.log.warn({ peer: endpoint.peer, code: err.code, err: err.message }, 'peer refused');
          },
        );
      });
    }
  }

  /** The bound UCX port, or null without a listener. */
  get port(): number | null {
    return this.listener?.port ?? null;
  }

  get epoch(): number | null {
    return this.plan?.epoch ?? null;
  }

  /** Applies a plan if its epoch is newer than the one in force; returns whether it did. */
  setPlan(plan: ChainPlan): boolean {
    if (this.plan !== null && plan.epoch <= this.plan.epoch) return false;
    this.plan = plan;
    this.metrics.epoch.set(plan.epoch);
    this.log.info({ epoch: plan.epoch, relays: plan.relays.length, position: positionOf(plan, this.options.relayId) }, 'chain plan applied');
    this.cooldown.clear();
    const candidates = downstreamOf(plan, this.options.relayId);
    if (this.downstream && !candidates.some((m) => m.id === this.downstream!.member.id && m.address === this.downstream!.member.address)) {
      this.dropDownstream('no longer in the plan after us');
    } else if (this.downstream && candidates[0]?.id !== this.downstream.member.id) {
      this.dropDownstream('plan changed');
    }
    this.ensureDownstream();
    return true;
  }

  status(): BroadcastStatus {
    const d = this.downstream;
    return {
      relayId: this.options.relayId,
      epoch: this.plan?.epoch ?? null,
      position: this.plan ? positionOf(this.plan, this.options.relayId) : -1,
      port: this.port,
      downstream: d && {
        id: d.member.id,
        address: d.member.address,
        sending: [...d.sessions.values()].map((s) => ({ model: s.source.model, version: s.source.version, chunksSent: s.sentChunks })),
      },
      upstreams: [...this.upstreams].map((l) => ({ id: l.peerId, role: l.role })),
      receiving: [
        ...[...this.settingUp.values()].map((p) => ({ ...p, hwm: 0, settingUp: true })),
        ...[...this.arrivals.values()].map(({ transfer: t }) => ({ model: t.model, version: t.version, hwm: t.hwm, chunks: t.chunkCount })),
      ],
      skipped: [...this.cooldown.keys()],
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    this.store.off('complete', this.onComplete);
    this.store.off('retired', this.onRetired);
    this.listener?.close();
    this.dropDownstream('relay stopping');
    await Promise.all([...this.upstreams].map((l) => l.close()));
    for (const registration of this.registrations.values()) registration.release();
    this.registrations.clear();
    this.worker.close();
  }

  // ---- upstream side -----------------------------------------------------------------------

  private admit(peerId: string, role: PeerRole, epoch: number): [string, string] | null {
    if (this.closed) return ['ERR_RELAY_STOPPING', 'the relay is stopping'];
    if (role === 'publisher') return null;
    // A peer (authenticated with the job secret) that already follows a newer plan than ours:
    // the plan reaches us a moment later; refusing would only delay the new link by a retry.
    if (epoch > (this.plan?.epoch ?? 0)) return null;
    if (this.plan === null || positionOf(this.plan, peerId) < 0) {
      return ['ERR_NOT_IN_PLAN', `relay ${peerId} is not in the chain plan (epoch ${this.plan?.epoch ?? 'none'})`];
    }
    return null;
  }

  private upstreamJoined(link: PeerLink): void {
    if (this.closed) {
      void link.close();
      return;
    }
    this.upstreams.add(link);
    this.log.info({ peer: link.peerId, role: link.role, address: link.endpoint.peer }, 'upstream peer connected');
    link.onBadMessage = (code) => this.metrics.badMessages.inc({ code });
    link.endpoint.onClose((err) => {
      this.upstreams.delete(link);
      for (const arrival of this.arrivals.values()) arrival.upstreams.delete(link);
      this.log.info({ peer: link.peerId, code: err?.code }, 'upstream peer gone');
      if (err && link.role === 'relay' && !this.closed && !this.leftOnPurpose.has(link)) {
        this.metrics.upstreamFailures.inc({ reason: err.code });
        this.options.onPeerFailure?.(link.peerId, 'upstream', err.code);
      }
    });
    link.setHandler((message, incoming) => this.upstreamMessage(link, message, incoming));
  }

  private upstreamMessage(link: PeerLink, message: PeerMessage, incoming: IncomingMessage): void {
    switch (message.t) {
      case 'offer':
        void this.handleOffer(link, message, incoming);
        return;
      case 'chunk':
        this.handleChunk(link, message, incoming);
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
        this.reject(link, 'ERR_PEER_UNEXPECTED', `unexpected ${message.t} from upstream`);
    }
  }

  /** Counts and answers a bad message; the link stays (the peer passed authentication). */
  private reject(link: PeerLink, code: string, message: string): void {
    this.metrics.badMessages.inc({ code });
    this.log.warn({ peer: link.peerId, code }, message);
    void link.send({ t: 'error', code, message }).catch(() => undefined);
  }

  private async handleOffer(link: PeerLink, offer: PeerMessageOf<'offer'>, incoming: IncomingMessage): Promise<void> {
    const k = transferKey(offer.model, offer.version);
    const decline = (code: string, message: string): void => {
      incoming.release();
      void link.send({ t: 'decline', model: offer.model, version: offer.version, code, message }).catch(() => undefined);
    };
    const existing = this.arrivals.get(k);
    if (existing) {
      incoming.release();
      existing.upstreams.add(link);
      existing.transfer.setUpstream(link.endpoint.id);
      const { from, have } = existing.transfer.resumePoint();
      this.log.info({ peer: link.peerId, model: offer.model, version: offer.version, from }, 'resuming a transfer with a new upstream');
      void link.send({ t: 'accept', model: offer.model, version: offer.version, from, have }).catch(() => undefined);
      return;
    }
    const held = this.findVersion(offer.model, offer.version);
    if (held?.state === 'complete') {
      decline('ERR_VERSION_EXISTS', 'this relay already holds the version');
      void link.send({ t: 'progress', model: offer.model, version: offer.version, hwm: held.layout.chunkCount, complete: true }).catch(() => undefined);
      return;
    }
    const latest = this.store.latest(offer.model);
    if (latest !== null && latest.version > offer.version) {
      decline('ERR_STALE_VERSION', `this relay holds the newer version ${latest.version}`);
      return;
    }
    if (this.offersInProgress.has(k) || held) {
      decline('ERR_BUSY', 'the version is being set up from another offer; offer again');
      return;
    }
    if (offer.headerBytes !== incoming.length || offer.headerBytes > MAX_HEADER_BYTES + 8 || offer.headerBytes >= offer.size) {
      this.metrics.badMessages.inc({ code: 'ERR_PEER_BAD_OFFER' });
      decline('ERR_PEER_BAD_OFFER', `header of ${incoming.length} bytes for ${offer.headerBytes} announced, version of ${offer.size}`);
      return;
    }
    this.offersInProgress.add(k);
    try {
      const { v, offered } = await this.setUp(link, offer, incoming, k);
      const transfer = new IncomingTransfer(this.store, v, offered.checksums, this.metrics, this.log);
      transfer.setUpstream(link.endpoint.id);
      const arrival: Arrival = { transfer, upstreams: new Set([link]) };
      this.arrivals.set(k, arrival);
      // Chunks are received straight into the segment (and forwarded from it while they arrive):
      // registered, an RDMA transport need not pin each chunk's pages. The writable mapping closes
      // when the version completes or is abandoned, and its registration must go with it: a
      // registration holds its memory, so one left behind would keep a whole version mapped.
      const receiving = v.mapping;
      if (receiving !== null) this.registerOnce(receiving);
      const started = performance.now();
      transfer.done.then(
        () => {
          if (receiving !== null) this.releaseRegistration(receiving);
          this.metrics.transfers.inc({ direction: 'in', result: 'complete' });
          this.metrics.transferSeconds.observe({ direction: 'in' }, (performance.now() - started) / 1e3);
          this.arrivals.delete(k);
          for (const up of arrival.upstreams) {
            void up.send({ t: 'progress', model: v.model, version: v.version, hwm: v.layout.chunkCount, complete: true }).catch(() => undefined);
          }
        },
        () => {
          if (receiving !== null) this.releaseRegistration(receiving);
          this.metrics.transfers.inc({ direction: 'in', result: 'abandoned' });
          this.arrivals.delete(k);
        },
      );
      this.log.info({ peer: link.peerId, model: v.model, version: v.version, size: v.layout.totalSize, chunks: v.layout.chunkCount }, 'receiving a version');
      await link.send({ t: 'accept', model: v.model, version: v.version, from: 0, have: [] });
      // Forward while receiving: the successor gets each chunk as soon as it is verified here.
      this.offer(transfer);
    } catch (err) {
      const code = (err as LaminarError).code ?? 'ERR_INTERNAL';
      this.metrics.badMessages.inc({ code });
      this.log.warn({ peer: link.peerId, model: offer.model, version: offer.version, code, err: (err as Error).message }, 'offer declined');
      decline(code, (err as Error).message);
    } finally {
      this.offersInProgress.delete(k);
    }
  }

  /**
   * Takes the offered header and sets the version's segment up. That (every page allocated) can
   * outlast the sender's stall limit, which runs from its offer on: most of a minute for a 145 GB
   * model on 4 KiB pages. Meanwhile a progress message with nothing received tells the sender
   * that we are at it, and our status (so the manager's stall watch too) shows the setup.
   */
  private async setUp(link: PeerLink, offer: PeerMessageOf<'offer'>, incoming: IncomingMessage, k: string): Promise<{ v: StoredVersion; offered: OfferedVersion }> {
    const beat = setInterval(
      () => void link.send({ t: 'progress', model: offer.model, version: offer.version, hwm: 0, complete: false }).catch(() => undefined),
      keepaliveIntervalFor(this.options.stallMs),
    );
    try {
      const header = Buffer.allocUnsafe(offer.headerBytes);
      await incoming.receiveInto(header, 0);
      const offered = parseOffered(header, offer.size, { model: offer.model, version: offer.version });
      this.settingUp.set(k, { model: offered.model, version: offered.version, chunks: offered.layout.chunkCount });
      return { v: await this.store.beginReceive(offered), offered };
    } finally {
      clearInterval(beat);
      this.settingUp.delete(k);
    }
  }

  private handleChunk(link: PeerLink, chunk: PeerMessageOf<'chunk'>, incoming: IncomingMessage): void {
    const arrival = this.arrivals.get(transferKey(chunk.model, chunk.version));
    if (arrival === undefined) {
      incoming.release();
      this.reject(link, 'ERR_UNKNOWN_TRANSFER', `chunk ${chunk.index} of ${chunk.model} v${chunk.version}, which was not offered`);
      return;
    }
    const { transfer } = arrival;
    if (chunk.index >= transfer.chunkCount) {
      incoming.release();
      this.reject(link, 'ERR_CHUNK_OUT_OF_RANGE', `chunk ${chunk.index} of a version with ${transfer.chunkCount} chunks`);
      return;
    }
    const expected = Math.min(transfer.layout.chunkSize, transfer.layout.dataLength - chunk.index * transfer.layout.chunkSize);
    if (incoming.length !== expected || incoming.data !== undefined || incoming.dropped) {
      incoming.release();
      this.reject(link, 'ERR_CHUNK_LENGTH', `chunk ${chunk.index} carries ${incoming.length} bytes, expected ${expected} by rendezvous`);
      return;
    }
    let lane = this.lanes.get(link);
    if (lane === undefined) {
      lane = new PullLane();
      this.lanes.set(link, lane);
    }
    void transfer.receive(chunk.index, incoming, link.endpoint.id, lane).then((outcome) => {
      if (outcome === 'corrupt' || outcome === 'failed') {
        void link.send({ t: 'nack', model: chunk.model, version: chunk.version, index: chunk.index }).catch(() => undefined);
      }
    });
  }

  // ---- downstream side ---------------------------------------------------------------------

  private tick(): void {
    if (this.closed) return;
    this.ensureDownstream();
    const now = Date.now();
    for (const { transfer } of this.arrivals.values()) {
      if (now - transfer.lastActivity > this.options.partialTtlMs) {
        void transfer.abandon(`no upstream sent anything for ${this.options.partialTtlMs} ms`);
      }
    }
  }

  /** Connects to the first reachable relay after us in the plan (or a better one than now). */
  private ensureDownstream(): void {
    if (this.closed || this.connecting || this.plan === null) return;
    const now = Date.now();
    const candidates = downstreamOf(this.plan, this.options.relayId);
    const currentAt = this.downstream ? candidates.findIndex((m) => m.id === this.downstream!.member.id) : candidates.length;
    const better = candidates.slice(0, currentAt).find((m) => (this.cooldown.get(m.id) ?? 0) <= now);
    if (better === undefined) return;
    this.connecting = true;
    const epoch = this.plan.epoch;
    connectPeer(this.worker, better.id, better.address, {
      selfId: this.options.relayId,
      role: 'relay',
      secret: this.options.secret,
      epoch,
      timeoutMs: this.options.handshakeTimeoutMs,
      silenceMs: this.options.stallMs,
    }).then(
      (link) => {
        this.connecting = false;
        // A new plan may have come during the handshake: keep the link if it still names this relay first.
        const stillFirst = this.plan !== null && downstreamOf(this.plan, this.options.relayId)[0]?.id === better.id;
        if (this.closed || (this.plan?.epoch !== epoch && !stillFirst)) {
          this.sayGoodbye(link, 'plan changed during the handshake');
          this.ensureDownstream();
          return;
        }
        this.cooldown.delete(better.id);
        this.unreachableLogged.delete(better.id);
        if (this.downstream) this.dropDownstream(`${better.id} is reachable again`);
        this.useDownstream(better, link);
      },
      (err: LaminarError) => {
        this.connecting = false;
        this.cooldown.set(better.id, Date.now() + this.options.retryMs);
        this.metrics.peerFailures.inc({ reason: err.code ?? 'connect' });
        // A refusal comes from a live relay (not in its plan yet, say): not a failure to report.
        const refused = err instanceof PeerRefusedError && err.code !== 'ERR_PEER_CLOSED';
        if (!this.closed && !refused) this.options.onPeerFailure?.(better.id, 'downstream', err.code ?? 'connect');
        const level = this.unreachableLogged.has(better.id) ? 'debug' : 'warn';
        this.unreachableLogged.add(better.id);
        this.log[level]({ peer: better.id, address: better.address, code: err.code, err: err.message }, 'cannot reach the next relay: skipping it for now (retrying)');
        // Straight on to the next candidate.
        queueMicrotask(() => this.ensureDownstream());
      },
    );
  }

  private useDownstream(member: ChainMember, link: PeerLink): void {
    const d: Downstream = { member, link, sessions: new Map() };
    this.downstream = d;
    this.metrics.retargets.inc();
    this.log.info({ peer: member.id, address: member.address }, 'sending downstream to');
    link.onBadMessage = (code) => this.metrics.badMessages.inc({ code });
    link.setHandler((message, incoming) => {
      incoming.release();
      if (message.t === 'error') {
        this.log.warn({ peer: member.id, code: message.code, message: message.message }, 'downstream reported an error');
        return;
      }
      if ('model' in message && 'version' in message) d.sessions.get(transferKey(message.model, message.version))?.handle(message);
    });
    link.endpoint.onClose((err) => {
      if (this.downstream !== d) return;
      this.downstreamFailed(d, err ?? new LaminarError('ERR_PEER_CLOSED', `${member.id} closed the connection`));
    });
    for (const source of this.newestSources()) this.offer(source);
  }

  private downstreamFailed(d: Downstream, err: LaminarError): void {
    if (this.downstream !== d) return;
    this.metrics.peerFailures.inc({ reason: err.code ?? 'unknown' });
    this.log.warn({ peer: d.member.id, code: err.code, err: err.message }, 'downstream relay lost: skipping to the next one');
    this.options.onPeerFailure?.(d.member.id, 'downstream', err.code ?? 'unknown');
    this.cooldown.set(d.member.id, Date.now() + this.options.retryMs);
    this.dropDownstream(err.message);
    this.ensureDownstream();
  }

  private dropDownstream(reason: string): void {
    const d = this.downstream;
    if (d === null) return;
    this.downstream = null;
    for (const session of d.sessions.values()) session.cancel(new LaminarError('ERR_RETARGETED', reason));
    d.sessions.clear();
    this.sayGoodbye(d.link, reason);
  }

  /**
   * Closes a downstream link on purpose, saying so first: the receiver must not mistake a
   * retarget for a failure of this relay (and report it dead to the manager).
   */
  private sayGoodbye(link: PeerLink, reason: string): void {
    void link.closeWith(GOODBYE, reason);
  }

  /** The newest version of each model this relay has or is receiving. */
  private newestSources(): ChunkSource[] {
    const newest = new Map<string, ChunkSource>();
    const consider = (source: ChunkSource): void => {
      const current = newest.get(source.model);
      if (current === undefined || current.version < source.version) newest.set(source.model, source);
    };
    for (const v of this.store.list()) if (v.state === 'complete' && this.store.latest(v.model) === v) consider(new StoredSource(v));
    for (const { transfer } of this.arrivals.values()) consider(transfer);
    return [...newest.values()];
  }

  /** True while a version is arriving here or being sent downstream. */
  get busy(): boolean {
    if (this.arrivals.size > 0) return true;
    for (const s of this.downstream?.sessions.values() ?? []) if (!s.done) return true;
    return false;
  }

  private findVersion(model: string, version: number): StoredVersion | undefined {
    return this.store.list().find((v) => v.model === model && v.version === version);
  }

  private versionComplete(v: StoredVersion): void {
    if (this.closed) return;
    // A newer version makes older partial arrivals of the model pointless.
    for (const { transfer } of [...this.arrivals.values()]) {
      if (transfer.model === v.model && transfer.version < v.version) void transfer.abandon(`version ${v.version} is complete`);
    }
    if (this.store.latest(v.model) === v) this.offer(new StoredSource(v));
  }

  private versionRetired(v: StoredVersion): void {
    if (v.mapping) this.releaseRegistration(v.mapping);
  }

  private releaseRegistration(mapping: Mapping): void {
    this.registrations.get(mapping)?.release();
    this.registrations.delete(mapping);
  }

  /** Starts sending `source` downstream (unless it is already on its way there). */
  private offer(source: ChunkSource): void {
    const d = this.downstream;
    if (d === null || this.closed) return;
    const k = transferKey(source.model, source.version);
    if (d.sessions.has(k)) return;
    for (const [otherKey, other] of d.sessions) {
      if (other.source.model === source.model && other.source.version < source.version) {
        other.cancel(new LaminarError('ERR_SUPERSEDED', `version ${source.version} supersedes ${other.source.version}`));
        d.sessions.delete(otherKey);
      }
    }
    try {
      this.registerOnce(source.mapping);
    } catch {
      // No mapping left (the version retired meanwhile): the session below fails on its own.
    }
    const stored = source instanceof StoredSource ? this.findVersion(source.model, source.version) : undefined;
    if (stored) this.store.lease(stored);
    const session = new OutgoingTransfer(d.link, source, {
      window: this.options.window,
      stallMs: this.options.stallMs,
      metrics: this.metrics,
      log: this.log,
    });
    d.sessions.set(k, session);
    session.start().then(
      (result) => {
        this.metrics.transfers.inc({ direction: 'out', result });
        if (result === 'complete') {
          this.metrics.transferSeconds.observe({ direction: 'out' }, (performance.now() - session.startedAt) / 1e3);
          this.log.info({ peer: d.member.id, model: source.model, version: source.version, chunksSent: session.sentChunks }, 'version delivered downstream');
        } else if (session.declined?.code === 'ERR_BUSY') {
          // Another offer of the same version is being set up there: offer again shortly.
          setTimeout(() => this.offer(source), 250).unref();
        } else if (session.declined && session.declined.code !== 'ERR_VERSION_EXISTS' && session.declined.code !== 'ERR_STALE_VERSION') {
          this.log.error({ peer: d.member.id, model: source.model, version: source.version, ...session.declined }, 'downstream relay declined the version');
        }
      },
      (err: LaminarError) => {
        this.metrics.transfers.inc({ direction: 'out', result: 'failed' });
        const linkProblem = err.code !== 'ERR_RETARGETED' && err.code !== 'ERR_SUPERSEDED' && err.code !== 'ERR_TRANSFER_ABANDONED';
        if (linkProblem && this.downstream === d) {
          this.downstreamFailed(d, err);
        }
      },
    ).finally(() => {
      if (d.sessions.get(k) === session) d.sessions.delete(k);
      if (stored) this.store.unlease(stored);
    });
  }

  /**
   * Registers a version's mapping with UCX, once, for the chunks sent from it or received into
   * it. Registration is an optimisation for RDMA (without it UCX registers each chunk's range on
   * the fly) and runs on the thread pool: the chunks moved meanwhile go unregistered.
   */
  private registerOnce(mapping: Mapping): void {
    if (this.registrations.has(mapping)) return;
    const started = performance.now();
    let registration: Registration;
    try {
      registration = this.worker.register(mapping);
    } catch (err) {
      this.log.debug({ err }, 'memory registration refused');
      return;
    }
    this.registrations.set(mapping, registration);
    registration.ready.then(
      () => this.metrics.registerSeconds.observe((performance.now() - started) / 1e3),
      (err: LaminarError) => {
        // Released (the version retired) or the worker closed before it was done: nothing failed.
        if (err.code === 'ERR_UCX_UNREGISTERED' || err.code === 'ERR_UCX_CLOSED') return;
        this.metrics.registerFailures.inc({ code: err.code ?? 'ERR_UCX' });
        this.log.warn({ code: err.code, err: err.message, bytes: mapping.size }, 'memory registration failed: the version is sent unregistered');
      },
    );
  }
}

