/**
 * The relay's downstream side of the broadcast: it sends every version it holds or is receiving
 * (the newest of each model) to its successor in the plan, forwarding each chunk as soon as it
 * is verified here. When the successor dies or stalls, the relay skips to the next relay in the
 * plan, which resumes from its own high-water mark; skipped relays are retried and taken back
 * when they answer again. Separate from the upstream side (upstream.ts): the two share only the
 * plan, the registrations and the versions arriving, which the broadcaster passes between them.
 */
import type { Logger } from 'pino';
import { LaminarError } from '../../common/errors.js';
import type { UcxWorker } from '../../ucx/index.js';
import type { StoredVersion, VersionStore } from '../store.js';
import type { BroadcasterOptions } from './options.js';
import { PeerRefusedError, connectPeer, type PeerLink } from './link.js';
import type { BroadcastMetrics } from './metrics.js';
import { OutgoingTransfer, transferKey } from './outgoing.js';
import { downstreamOf, type ChainMember, type ChainPlan } from './plan.js';
import type { MappingRegistrations } from './registrations.js';
import { StoredSource, type ChunkSource } from './source.js';
import type { BroadcastStatus } from '../protocol/status.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { inBackground } from '../background.js';
import { findBase, type BaseRef } from './delta/base.js';
import { encoderAgainst, type ChunkEncoder } from './delta/encoder.js';
import { EncodeMeter } from './delta/policy.js';
import { LinkActivity } from './link-activity.js';

/** The code of the 'error' message a relay sends before closing a downstream link on purpose. */
export const GOODBYE = ErrorCodes.RETARGETED;

interface Downstream {
  member: ChainMember;
  link: PeerLink;
  sessions: Map<string, OutgoingTransfer>;
  /** Which sessions have chunks in flight on the link now: a hop that shared it times nothing. */
  activity: LinkActivity;
}

/** What the downstream side needs of the broadcaster around it. */
export interface DownstreamContext {
  store: VersionStore;
  worker: UcxWorker;
  options: BroadcasterOptions;
  metrics: BroadcastMetrics;
  log: Logger;
  registrations: MappingRegistrations;
  plan(): ChainPlan | null;
  closed(): boolean;
  /** Versions arriving from upstream, sent on while they arrive. */
  arriving(): ChunkSource[];
}

export class DownstreamSide {
  private downstream: Downstream | null = null;
  private connecting = false;
  private readonly cooldown = new Map<string, number>();
  /** Relays whose unreachability was already logged at warn (once until they answer again). */
  private readonly unreachableLogged = new Set<string>();
  private readonly store: VersionStore;
  private readonly options: BroadcasterOptions;
  private readonly metrics: BroadcastMetrics;
  private readonly log: Logger;
  /** What this relay's encodes measured (delta/policy.ts), across its sessions. */
  private readonly encodeMeter = new EncodeMeter();

  constructor(private readonly ctx: DownstreamContext) {
    this.store = ctx.store;
    this.options = ctx.options;
    this.metrics = ctx.metrics;
    this.log = ctx.log;
  }

  /** A newer plan is in force: keep the successor if it is still the first after us, else retarget. */
  planChanged(plan: ChainPlan): void {
    this.cooldown.clear();
    const candidates = downstreamOf(plan, this.options.relayId);
    if (this.downstream && !candidates.some((m) => m.id === this.downstream!.member.id && m.address === this.downstream!.member.address)) {
      this.dropDownstream('no longer in the plan after us');
    } else if (this.downstream && candidates[0]?.id !== this.downstream.member.id) {
      this.dropDownstream('plan changed');
    }
    this.ensureDownstream();
  }

  /** The downstream part of the broadcaster's status. */
  status(): Pick<BroadcastStatus, 'downstream' | 'skipped'> {
    const d = this.downstream;
    return {
      downstream: d && {
        id: d.member.id,
        address: d.member.address,
        sending: [...d.sessions.values()].map((s) => ({ model: s.source.model, version: s.source.version, chunksSent: s.sentChunks })),
      },
      skipped: [...this.cooldown.keys()],
    };
  }

  /** True while a version is being sent downstream. */
  get busy(): boolean {
    for (const s of this.downstream?.sessions.values() ?? []) if (!s.done) return true;
    return false;
  }

  close(): void {
    this.dropDownstream('relay stopping');
  }

  /** Connects to the first reachable relay after us in the plan (or a better one than now). */
  ensureDownstream(): void {
    const plan = this.ctx.plan();
    if (this.ctx.closed() || this.connecting || plan === null) return;
    const now = Date.now();
    const candidates = downstreamOf(plan, this.options.relayId);
    const currentAt = this.downstream ? candidates.findIndex((m) => m.id === this.downstream!.member.id) : candidates.length;
    const better = candidates.slice(0, currentAt).find((m) => (this.cooldown.get(m.id) ?? 0) <= now);
    if (better === undefined) return;
    this.connecting = true;
    const epoch = plan.epoch;
    const connecting = connectPeer(this.ctx.worker, better.id, better.address, {
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
        const current = this.ctx.plan();
        const stillFirst = current !== null && downstreamOf(current, this.options.relayId)[0]?.id === better.id;
        if (this.ctx.closed() || (current?.epoch !== epoch && !stillFirst)) {
          this.sayGoodbye(link, 'plan changed during the handshake');
          this.ensureDownstream();
          return;
        }
        this.cooldown.delete(better.id);
        this.unreachableLogged.delete(better.id);
        if (this.downstream) this.dropDownstream(`${better.id} is reachable again`);
        this.useDownstream(better, link);
      },
      (reason: unknown) => {
        // A LaminarError by design; the fallbacks cover anything else that rejects.
        const err = reason as Error & { code?: string };
        this.connecting = false;
        this.cooldown.set(better.id, Date.now() + this.options.retryMs);
        this.metrics.peerFailures.inc({ reason: err.code ?? 'connect' });
        // A refusal comes from a live relay (not in its plan yet, say): not a failure to report.
        const refused = err instanceof PeerRefusedError && err.code !== ErrorCodes.PEER_CLOSED;
        if (!this.ctx.closed() && !refused) this.options.onPeerFailure?.(better.id, 'downstream', err.code ?? 'connect');
        const level = this.unreachableLogged.has(better.id) ? 'debug' : 'warn';
        this.unreachableLogged.add(better.id);
        this.log[level](
          { peer: better.id, address: better.address, code: err.code, err: err.message },
          'cannot reach the next relay: skipping it for now (retrying)',
        );
        // Straight on to the next candidate.
        queueMicrotask(() => this.ensureDownstream());
      },
    );
    // The handlers above are the relay's own code: one that throws must not go unhandled.
    inBackground(connecting, this.log, 'taking on a downstream link', { failures: this.metrics.backgroundFailures });
  }

  private useDownstream(member: ChainMember, link: PeerLink): void {
    const d: Downstream = { member, link, sessions: new Map(), activity: new LinkActivity() };
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
      this.downstreamFailed(d, err ?? new LaminarError(ErrorCodes.PEER_CLOSED, `${member.id} closed the connection`));
    });
    for (const source of this.newestSources()) this.offer(source);
  }

  private downstreamFailed(d: Downstream, err: Error & { code?: string }): void {
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
    for (const session of d.sessions.values()) session.cancel(new LaminarError(ErrorCodes.RETARGETED, reason));
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
    for (const transfer of this.ctx.arriving()) consider(transfer);
    return [...newest.values()];
  }

  private findVersion(model: string, version: number): StoredVersion | undefined {
    return this.store.list().find((v) => v.model === model && v.version === version);
  }

  /**
   * An encoder of `source` against the base the downstream relay named, when this relay holds the
   * same base (delta/base.ts) and deltas are not off; null: full chunks.
   */
  private encoderFor(source: ChunkSource, ref: BaseRef): ChunkEncoder | null {
    const encoder = encoderAgainst(this.store, source, ref, this.options.delta, this.encodeMeter);
    if (encoder === null && this.options.delta !== 'off') {
      this.log.debug({ model: source.model, version: source.version, base: ref.version }, 'the successor holds a base this relay does not: full chunks');
    }
    return encoder;
  }

  /** Starts sending `source` downstream (unless it is already on its way there, or kept back). */
  offer(source: ChunkSource): void {
    const d = this.downstream;
    if (d === null || this.ctx.closed() || this.options.withhold?.(source.model, source.version)) return;
    const k = transferKey(source.model, source.version);
    if (d.sessions.has(k)) return;
    for (const [otherKey, other] of d.sessions) {
      if (other.source.model === source.model && other.source.version < source.version) {
        other.cancel(new LaminarError(ErrorCodes.SUPERSEDED, `version ${source.version} supersedes ${other.source.version}`));
        d.sessions.delete(otherKey);
      }
    }
    try {
      this.ctx.registrations.registerOnce(source.mapping);
    } catch {
      // No mapping left (the version retired meanwhile): the session below fails on its own.
    }
    const stored = source instanceof StoredSource ? this.findVersion(source.model, source.version) : undefined;
    if (stored) this.store.lease(stored);
    // The version the successor will likely name as its base, kept until the session ends: the
    // commit of `source` here would otherwise retire it (--keep-versions 0) before the accept.
    const base = this.options.delta === 'off' ? null : findBase(this.store, source.model, source.version, source.layout);
    if (base) this.store.lease(base);
    const session = new OutgoingTransfer(d.link, source, {
      window: this.options.window,
      stallMs: this.options.stallMs,
      metrics: this.metrics,
      log: this.log,
      delta: (base) => this.encoderFor(source, base),
      activity: d.activity,
    });
    d.sessions.set(k, session);
    const sending = session
      .start()
      .then(
        (result) => {
          this.metrics.transfers.inc({ direction: 'out', result });
          if (result === 'complete') {
            this.metrics.transferSeconds.observe({ direction: 'out' }, (performance.now() - session.startedAt) / 1e3);
            // The link's bandwidth (and per-chunk cost) for the chunk size of the next versions;
            // a hop of deltas timed the encoder as much as the link, and one that shared the link
            // with another session (two models at once) timed the other's bytes too.
            if (session.timesLink) this.store.chunkSizer.recordHop(session.hopSample());
            else if (!session.usedDelta)
              this.log.debug({ model: source.model, version: source.version }, 'hop not timed: it shared the link with another version');
            this.log.info({ peer: d.member.id, model: source.model, version: source.version, chunksSent: session.sentChunks }, 'version delivered downstream');
          } else if (session.declined?.code === ErrorCodes.BUSY) {
            // Another offer of the same version is being set up there: offer again shortly.
            setTimeout(() => this.offer(source), 250).unref();
          } else if (session.declined && session.declined.code !== ErrorCodes.VERSION_EXISTS && session.declined.code !== ErrorCodes.VERSION_STALE) {
            this.log.error({ peer: d.member.id, model: source.model, version: source.version, ...session.declined }, 'downstream relay declined the version');
          }
        },
        (reason: unknown) => {
          const err = reason as Error & { code?: string };
          this.metrics.transfers.inc({ direction: 'out', result: 'failed' });
          const linkProblem = err.code !== ErrorCodes.RETARGETED && err.code !== ErrorCodes.SUPERSEDED && err.code !== ErrorCodes.TRANSFER_ABANDONED;
          if (linkProblem && this.downstream === d) {
            this.downstreamFailed(d, err);
          }
        },
      )
      .finally(() => {
        if (d.sessions.get(k) === session) d.sessions.delete(k);
        if (stored) this.store.unlease(stored);
        if (base) this.store.unlease(base);
      });
    inBackground(sending, this.log, 'sending a version downstream', { failures: this.metrics.backgroundFailures });
  }
}
