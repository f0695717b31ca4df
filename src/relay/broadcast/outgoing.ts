/**
 * Sending one version to one downstream peer: offer it, start where the peer says (its
 * high-water mark), keep `window` chunks in flight, send again what fails verification, and
 * finish when the peer reports the version complete. A peer that stops taking chunks for
 * `stallMs` is treated as dead, like one whose connection broke. A peer that takes more than half
 * of that for one step is healthy but close to the limit (big chunks on a slow link): that is
 * counted and said, since the next slower moment would drop it.
 *
 * When the peer's accept names a base it holds and `delta` gives an encoder for it
 * (delta/encoder.ts), each chunk goes as whichever is smallest: 'same' as the base, a sparse
 * delta, or full. A chunk the peer nacks goes full from then on: whatever the delta's fault, the
 * full chunk heals it. A chunk that arrived here as a delta against the peer's base goes on as
 * it arrived as soon as it is here, before this relay has verified it (the peer verifies its own
 * rebuild); a chunk sent full waits, as always, for this relay's verification. A small delta
 * goes inline with its message (inline.ts), as does the offer's header; a full chunk by rendezvous.
 */
import type { Logger } from 'pino';
import { LaminarError, TimeoutError } from '../../common/errors.js';
import { watchdog, type Watchdog } from '../../common/watchdog.js';
import { chunkRange } from '../../safetensors/header.js';
import type { PeerLink } from './link.js';
import type { Payload } from '../../ucx/index.js';
import type { PeerMessage, PeerMessageOf } from './messages.js';
import type { BroadcastMetrics } from './metrics.js';
import type { ChunkSource } from './source.js';
import type { HopSample } from '../chunking/link-estimator.js';
import type { BaseRef } from './delta/base.js';
import type { ChunkEncoder, ChunkToSend } from './delta/encoder.js';
import { sendsInline } from './inline.js';
import type { LinkActivity, LinkUser } from './link-activity.js';

export type OutgoingResult = 'complete' | 'declined';

/** A hop with at most one delta chunk in this many (auto's probes) still measures the link. */
const MOSTLY_FULL = 16;

/** What a sender keys its transfers by: the peer's answers name the model and version. */
export const transferKey = (model: string, version: number): string => `${model}\u0000${version}`;

export interface OutgoingOptions {
  window: number;
  stallMs: number;
  metrics: BroadcastMetrics;
  log: Logger;
  /** Called after each chunk the peer has taken (progress of long pushes). */
  onChunk?: (sentChunks: number, chunkCount: number) => void;
  /**
   * Once every chunk is taken, the peer must report the version complete within this long (it
   * verifies each chunk as it lands: only its commit is left). Without it the wait is bounded
   * only by the link's keepalive, which a peer that answers pings but never completes passes.
   */
  completionTimeoutMs?: number;
  /** What to offer instead of the source's whole version (a part: relay/parts/). */
  offer?: { message: PeerMessage; payload: Payload };
  /** An encoder of the source against the base the peer named in its accept, or null to send every chunk full. */
  delta?: (base: BaseRef, source: ChunkSource) => ChunkEncoder | null;
  /** The link's transfers with chunks in flight (link-activity.ts): whether this one shared it. */
  activity?: LinkActivity;
}

export class OutgoingTransfer implements LinkUser {
  private next = 0;
  private readonly skip = new Set<number>();
  private readonly resend: number[] = [];
  /** Set when the peer's base is one this sender holds too. */
  private encoder: ChunkEncoder | null = null;
  /** Chunks whose send completed as a delta ('same' or 'sparse'). */
  private deltaChunks = 0;
  /** Chunks the peer nacked: sent full from then on. */
  private readonly fullOnly = new Set<number>();
  private inflight = 0;
  private waitingFor: number | null = null;
  private accepted = false;
  private finished = false;
  private lastProgress = Date.now();
  private warnedNearStall = false;
  private stallWatch: Watchdog | null = null;
  private resolve!: (result: OutgoingResult) => void;
  private reject!: (err: Error) => void;
  readonly result: Promise<OutgoingResult>;
  /** Chunks sent (resends included), for the resend-cost figure. */
  sentChunks = 0;
  /** Chunks and bytes whose send completed, and the time the link had any in flight: the hop's timing. */
  private carriedChunks = 0;
  private carriedBytes = 0;
  private busySeconds = 0;
  private busySince = 0;
  /** Another transfer had chunks in flight on the link while this one did: its hop times both. */
  private shared = false;
  /** Why the peer declined the offer, when it did. */
  declined: { code: string; message: string } | null = null;
  startedAt = 0;

  constructor(
    readonly link: PeerLink,
    readonly source: ChunkSource,
    private readonly options: OutgoingOptions,
  ) {
    this.result = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.result.catch(() => undefined);
  }

  /** Chunks (or a part's pieces) to send. */
  private get count(): number {
    return this.source.pieces?.count ?? this.source.layout.chunkCount;
  }

  get done(): boolean {
    return this.finished;
  }

  /**
   * Whether more than a few chunks went as deltas: such a hop's bytes and time say as much about
   * the encoder as about the link. A hop of full chunks with auto's occasional probe among them
   * still times the link.
   */
  get usedDelta(): boolean {
    return this.deltaChunks * MOSTLY_FULL > this.carriedChunks;
  }

  sharedLink(): void {
    this.shared = true;
  }

  /**
   * Whether the hop times the link: mostly full chunks, and the link to itself while it had
   * chunks in flight (link-activity.ts).
   */
  get timesLink(): boolean {
    return !this.usedDelta && !this.shared;
  }

  /**
   * What this hop carried and for how long the link had chunks in flight: time spent waiting on
   * our own upstream with nothing in flight (forwarding a version still arriving) or on the
   * receiver's segment setup (before its accept) is not the link's.
   */
  hopSample(): HopSample {
    const open = this.inflight > 0 ? (performance.now() - this.busySince) / 1e3 : 0;
    return { bytes: this.carriedBytes, chunks: this.carriedChunks, seconds: this.busySeconds + open };
  }

  /** Sends the offer (with the safetensors header as its payload). */
  start(): Promise<OutgoingResult> {
    this.startedAt = performance.now();
    const { layout } = this.source;
    let offer: { message: PeerMessage; payload: Payload };
    try {
      offer = this.options.offer ?? {
        message: { t: 'offer', model: this.source.model, version: this.source.version, size: layout.totalSize, headerBytes: layout.dataOffset },
        payload: {
          source: this.source.header ?? this.source.mapping,
          offset: 0,
          length: layout.dataOffset,
          ...(sendsInline(layout.dataOffset) ? { eager: true } : {}),
        },
      };
    } catch (err) {
      this.fail(err as Error); // no mapping left to read the header from (the version retired)
      return this.result;
    }
    this.link.send(offer.message, offer.payload).catch((err: unknown) => this.fail(err as Error));
    this.stallWatch = watchdog(Math.max(50, Math.floor(this.options.stallMs / 4)), (heldUp) => this.checkStall(heldUp));
    return this.result;
  }

  handle(message: PeerMessage): void {
    if (this.finished) return;
    switch (message.t) {
      case 'accept':
        this.onAccept(message);
        return;
      case 'decline':
        this.declined = { code: message.code, message: message.message };
        this.finish('declined');
        return;
      case 'nack':
        if (message.index < this.count) {
          this.options.metrics.nacks.inc();
          this.fullOnly.add(message.index);
          this.resend.push(message.index);
          this.pump();
        }
        return;
      case 'progress':
        if (this.inflight > 0) this.progressed('to take a chunk');
        else this.lastProgress = Date.now();
        if (message.complete) this.finish('complete');
        return;
      default:
        return;
    }
  }

  cancel(reason: LaminarError): void {
    this.fail(reason);
  }

  private onAccept(message: PeerMessageOf<'accept'>): void {
    if (this.accepted) return;
    this.accepted = true;
    this.progressed('to accept the offer');
    this.next = Math.min(message.from, this.count);
    for (const i of message.have) this.skip.add(i);
    // A part (pieces of a version published in parts) is never sent as a delta.
    if (message.base && this.source.pieces === undefined) this.encoder = this.options.delta?.(message.base, this.source) ?? null;
    this.options.log.debug(
      { peer: this.link.peerId, model: this.source.model, version: this.source.version, from: this.next, base: this.encoder?.base.version ?? null },
      'offer accepted',
    );
    this.pump();
  }

  private pick(): number | null {
    if (this.resend.length > 0) return this.resend[0]!;
    while (this.next < this.count && this.skip.has(this.next)) this.next++;
    return this.next < this.count ? this.next : null;
  }

  private pump(): void {
    while (!this.finished && this.accepted && this.inflight < this.options.window && this.waitingFor === null) {
      const index = this.pick();
      if (index === null) return;
      const encoder = this.fullOnly.has(index) ? null : this.encoder;
      if (!this.source.available(index) && !(encoder?.forwardable(index) ?? false)) {
        // Forward as soon as our own upstream delivers (and we verified) this chunk, or, when it
        // comes as a delta against the peer's base, as soon as its payload is here.
        this.waitingFor = index;
        (encoder?.whenSendable(index) ?? this.source.whenAvailable(index)).then(
          () => {
            this.waitingFor = null;
            this.pump();
          },
          (err: unknown) => this.fail(err as Error),
        );
        return;
      }
      if (this.resend[0] === index) this.resend.shift();
      else this.next++;
      this.sendChunk(index);
    }
  }

  private sendChunk(index: number): void {
    const { offset, length } = this.source.pieces?.range(index) ?? chunkRange(this.source.layout, index);
    // The stall clock runs while the peer has work: time spent before this send waiting on our
    // own upstream (nothing in flight) is not the peer's, however long it was.
    if (this.inflight === 0) {
      this.lastProgress = Date.now();
      this.busySince = performance.now();
      this.options.activity?.started(this);
    }
    this.inflight++;
    this.sentChunks++;
    // The encode runs on the pool; meanwhile the next chunks of the window are picked.
    const encoding: Promise<ChunkToSend | null> = this.encoder !== null && !this.fullOnly.has(index) ? this.encoder.encode(index) : Promise.resolve(null);
    encoding
      .then((encoded) => {
        if (this.finished) return;
        const kind = encoded?.kind ?? 'full';
        const header: PeerMessage = {
          t: 'chunk',
          model: this.source.model,
          version: this.source.version,
          index,
          ...(kind !== 'full' ? { enc: kind } : {}),
        };
        let payload: Payload | undefined;
        // Read only for a full chunk, which is verified here, so set up: a delta forwarded as it
        // arrived may leave before this relay's segment is (incoming.ts). Throws when the
        // version is no longer mapped here: the transfer fails below.
        if (encoded === null || encoded.kind === 'full') payload = { source: this.source.mapping, offset, length };
        else if (encoded.kind === 'sparse') {
          const bytes = encoded.payload.byteLength;
          payload = { source: encoded.payload, offset: 0, length: bytes, ...(sendsInline(bytes) ? { eager: true } : {}) };
        }
        const wireBytes = payload?.length ?? 0;
        return this.link.send(header, payload).then(() => {
          this.progressed('to take a chunk');
          this.inflight--;
          this.carriedChunks++;
          this.carriedBytes += wireBytes;
          if (this.inflight === 0) {
            this.busySeconds += (performance.now() - this.busySince) / 1e3;
            this.options.activity?.stopped(this);
          }
          this.options.metrics.chunksSent.inc();
          this.options.metrics.chunkBytesSent.inc(wireBytes);
          this.options.metrics.bytes.sent += wireBytes;
          if (kind !== 'full') this.deltaChunks++;
          if (this.source.pieces === undefined) this.options.metrics.countDelta('out', kind, length, wireBytes, encoded?.forwarded === true);
          this.options.onChunk?.(this.sentChunks, this.count);
          this.pump();
        });
      })
      .catch((err: unknown) => this.fail(err as Error));
  }

  /** The peer moved while we waited on it: its stall clock starts again, after a look at how long it took. */
  private progressed(what: string): void {
    const now = Date.now();
    const waited = now - this.lastProgress;
    this.lastProgress = now;
    if (2 * waited <= this.options.stallMs) return;
    this.options.metrics.nearStalls.inc();
    if (this.warnedNearStall) return;
    this.warnedNearStall = true;
    this.options.log.warn(
      { peer: this.link.peerId, model: this.source.model, version: this.source.version, waitedMs: waited, stallMs: this.options.stallMs },
      `${this.link.peerId} took ${waited} ms ${what}, more than half of the ${this.options.stallMs} ms allowed (--peer-timeout): a slower moment would drop it as stalled; raise --peer-timeout or lower --chunk-size`,
    );
  }

  /** `heldUp`: our own event loop was blocked, which is not the peer's stall: its clock starts again. */
  private checkStall(heldUp: boolean): void {
    if (this.finished) return;
    if (heldUp) this.lastProgress = Date.now();
    const waitingOnPeer = !this.accepted || this.inflight > 0;
    if (waitingOnPeer && Date.now() - this.lastProgress > this.options.stallMs) {
      this.fail(new TimeoutError(`${this.link.peerId} took nothing for ${this.options.stallMs} ms`, { peer: this.link.peerId }));
      return;
    }
    const limit = this.options.completionTimeoutMs;
    if (limit !== undefined && this.awaitingCompletion && Date.now() - this.lastProgress > limit) {
      this.fail(
        new TimeoutError(`${this.link.peerId} took every chunk but did not report the version complete within ${limit} ms`, {
          peer: this.link.peerId,
          stage: 'verification',
        }),
      );
    }
  }

  /**
   * Every chunk is taken and nothing is in flight: only the peer's report of completion is (or,
   * once the transfer ended, was) awaited.
   */
  get awaitingCompletion(): boolean {
    return this.accepted && this.inflight === 0 && this.resend.length === 0 && this.waitingFor === null && this.pick() === null;
  }

  private finish(result: OutgoingResult): void {
    if (this.finished) return;
    this.finished = true;
    this.options.activity?.stopped(this);
    this.stallWatch?.stop();
    this.encoder?.close();
    this.resolve(result);
  }

  private fail(err: Error): void {
    if (this.finished) return;
    this.finished = true;
    this.options.activity?.stopped(this);
    this.stallWatch?.stop();
    this.encoder?.close();
    this.reject(err);
  }
}
