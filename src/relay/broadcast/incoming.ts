/**
 * A version arriving from upstream: chunks land directly in the segment, each is verified
 * against the header's checksum before it counts (and before it is forwarded), a bad one is
 * asked for again. The contiguous high-water mark is what a new upstream resumes from. With a
 * base (delta/base.ts), a chunk may come as a delta against it instead, rebuilt here
 * (delta/reconstruct.ts) and verified the same way; the base stays leased until the version is
 * complete or abandoned. The delta's payload is kept until the successor has taken it: a
 * successor that holds the same base gets the same payload, as soon as it is here, while this
 * relay rebuilds the chunk for itself (it verifies its own rebuild, as this relay does).
 *
 * The transfer may start before the segment is set up (`ready`: the offer is accepted, and the
 * version forwarded downstream, while the pages are allocated): chunks wait for it before they
 * are written, and a delta's payload, which lands in a buffer, is kept for the successor at once.
 * The version's header (the sender's, verbatim) is at hand from the start for the offer downstream.
 */
import type { Logger } from 'pino';
import { LaminarError } from '../../common/errors.js';
import { checksumHex, type Mapping } from '../../native/index.js';
import { chunkRange } from '../../safetensors/header.js';
import type { IncomingMessage } from '../../ucx/index.js';
import type { StoredVersion, VersionStore } from '../store.js';
import type { BroadcastMetrics } from './metrics.js';
import { VersionSource, type ArrivedDelta } from './source.js';
import { ErrorCodes } from '../../common/error-codes.js';
import type { BaseRef } from './delta/base.js';
import { rebuildChunk, type DeltaEncoding } from './delta/reconstruct.js';

export type ChunkOutcome = 'verified' | 'duplicate' | 'corrupt' | 'failed';

/**
 * Delta payloads kept for the successor, at most this many bytes per arrival: past it a payload
 * is not kept and the successor gets the chunk encoded here from the verified bytes. Deltas are
 * a few percent of a chunk; the bound only keeps an arrival of near-chunk-sized deltas, which a
 * lagging successor would not take, from holding a version's worth of heap.
 */
export const KEEP_ARRIVED_BYTES = 256 * 1024 * 1024;

/** The version a delta arrival is rebuilt from, leased by the transfer, and how the sender names it. */
export interface ArrivalBase {
  v: StoredVersion;
  ref: BaseRef;
}

/**
 * Chunks from one link are pulled one at a time, in the order they were announced. With several
 * pulls at once the transport interleaves them and they all finish late, so each hop would add a
 * whole window of delay to the pipeline; one at a time, the first chunk is forwarded after one
 * chunk time. The announcements (small) still arrive ahead, so the link never idles.
 */
export class PullLane {
  private tail: Promise<void> = Promise.resolve();

  /** Runs `pull` after every pull queued before it on this lane. */
  run<T>(pull: () => Promise<T>): Promise<T> {
    const result = this.tail.then(pull);
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

export class IncomingTransfer extends VersionSource {
  private readonly verified: Uint8Array;
  /** Per chunk: the link whose copy is landing now (0: none), and a generation to spot late ones. */
  private readonly landingFrom: Uint32Array;
  private readonly generation: Uint32Array;
  /** The link that offered the version last: the upstream chunks are expected from. */
  private currentUpstream = 0;
  private verifiedCount = 0;
  private hwmValue = 0;
  private readonly waiters = new Map<number, { resolve(): void; reject(err: Error): void }[]>();
  private abandoned: LaminarError | null = null;
  /** Delta payloads here and not yet taken by the successor (see the header), and their bytes. */
  private readonly arrived = new Map<number, ArrivedDelta>();
  private arrivedBytes = 0;
  private readonly arrivalWaiters = new Map<number, (() => void)[]>();
  /** Per chunk: the rebuild writing it now (exclusiveWrite), settled either way. */
  private readonly rebuilding = new Map<number, Promise<void>>();
  readonly done: Promise<void>;
  private resolveDone!: () => void;
  private rejectDone!: (err: Error) => void;
  lastActivity = Date.now();

  constructor(
    private readonly store: VersionStore,
    v: StoredVersion,
    private readonly checksums: string[],
    private readonly metrics: BroadcastMetrics,
    private readonly log: Logger,
    /** The base delta chunks are rebuilt from (leased here until the transfer ends); null: full chunks only. */
    readonly base: ArrivalBase | null = null,
    /**
     * Settles once the segment is set up (store.reserveReceive); a rejection is the caller's to
     * report, and abandons nothing by itself.
     */
    private readonly ready: Promise<void> = Promise.resolve(),
    /** The version's header as the sender offered it (the segment's first bytes, once set up). */
    readonly header?: Uint8Array,
  ) {
    super(v);
    if (base) store.lease(base.v);
    this.verified = new Uint8Array(v.layout.chunkCount);
    this.landingFrom = new Uint32Array(v.layout.chunkCount);
    this.generation = new Uint32Array(v.layout.chunkCount);
    this.done = new Promise((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => undefined);
    // The base is needed no longer once the version is complete (or given up). The payloads
    // stay until the successor takes them, which may be after this relay completed the version:
    // they go with this object, once no outgoing transfer sends from it any more.
    // Not while a rebuild still reads it: one superseded after it started may outlast the version.
    if (base) this.done.finally(() => this.rebuildsSettled().then(() => store.unlease(base.v))).catch(() => undefined);
    void this.ready.then(
      () => this.prefault(),
      () => undefined,
    );
  }

  /** The segment's writable mapping once it is set up; null when that failed or the transfer was given up. */
  private async segment(): Promise<Mapping | null> {
    try {
      await this.ready;
    } catch {
      return null;
    }
    return this.abandoned ? null : this.v.mapping;
  }

  /**
   * Runs `write` (a delta's rebuild) into chunk `index` of the segment once it is set up and no
   * other rebuild of the chunk is in progress, unless the arrival was superseded by then: null,
   * nothing written. Why: a superseded arrival's rebuild, started after another link's copy of
   * the chunk was verified, would rewrite a chunk that is forwarded and served (with whatever
   * its payload says: a torn read upstream, say), and a rebuild copies the base's bytes before
   * it patches them (native/delta_codec.cc), which a copy verified meanwhile would see. A full
   * copy waits for a rebuild in progress before it lands (receive()); the version is completed,
   * and the base unleased, only once none runs.
   */
  private async exclusiveWrite(index: number, superseded: () => boolean, write: (mapping: Mapping) => Promise<bigint>): Promise<bigint | null> {
    for (;;) {
      const mapping = await this.segment();
      if (mapping === null || superseded()) return null;
      const busy = this.rebuilding.get(index);
      if (busy === undefined) {
        const writing = write(mapping);
        const settled = writing.then(
          () => undefined,
          () => undefined,
        );
        this.rebuilding.set(index, settled);
        void settled.then(() => {
          if (this.rebuilding.get(index) === settled) this.rebuilding.delete(index);
        });
        return writing;
      }
      await busy;
    }
  }

  /** Until no rebuild of chunk `index` runs. */
  private async rebuildSettled(index: number): Promise<void> {
    for (let busy = this.rebuilding.get(index); busy !== undefined; busy = this.rebuilding.get(index)) await busy;
  }

  /** Until no rebuild of any chunk runs. */
  private async rebuildsSettled(): Promise<void> {
    while (this.rebuilding.size > 0) await Promise.all(this.rebuilding.values());
  }

  /**
   * Faults the new segment's pages in ahead of the data, on the thread pool, front to back: a
   * page fault per 4 KiB on the receive path would otherwise cost a large share of a fast link.
   */
  private async prefault(): Promise<void> {
    const step = 64 * 1024 * 1024;
    for (let offset = 0; offset < this.v.layout.totalSize; offset += step) {
      const mapping = this.v.mapping;
      if (this.abandoned || this.v.state !== 'writing' || mapping === null) return;
      try {
        await mapping.populate(offset, Math.min(step, this.v.layout.totalSize - offset), true);
      } catch {
        return; // an optimisation only (older kernels lack MADV_POPULATE_WRITE)
      }
    }
  }

  protected override gone(): LaminarError {
    return this.abandoned ?? super.gone();
  }
  get hwm(): number {
    return this.hwmValue;
  }
  get complete(): boolean {
    return this.verifiedCount === this.v.layout.chunkCount && this.v.state === 'complete';
  }
  /** Every chunk is here and verified; the version may still be completing (its segment sealed, its directory written). */
  get allVerified(): boolean {
    return this.verifiedCount === this.v.layout.chunkCount;
  }
  get chunkCount(): number {
    return this.v.layout.chunkCount;
  }

  /** Records which link now sends this version (the latest offer wins). */
  setUpstream(linkId: number): void {
    this.currentUpstream = linkId;
  }

  /** Where a (new) sender should start, what it may skip beyond that, and the base it may send deltas against. */
  resumePoint(): { from: number; have: number[]; base?: BaseRef } {
    const have: number[] = [];
    for (let i = this.hwmValue; i < this.verified.length && have.length < 65536; i++) if (this.verified[i]) have.push(i);
    return { from: this.hwmValue, have, ...(this.base ? { base: this.base.ref } : {}) };
  }

  available(index: number): boolean {
    return this.verified[index] === 1;
  }

  arrivedAs(index: number, ref: BaseRef): ArrivedDelta | undefined {
    return this.sameBase(ref) ? this.arrived.get(index) : undefined;
  }

  whenForwardable(index: number, ref: BaseRef): Promise<void> {
    if (this.arrivedAs(index, ref) !== undefined) return Promise.resolve();
    if (!this.sameBase(ref)) return this.whenAvailable(index);
    const arrives = new Promise<void>((resolve) => {
      const list = this.arrivalWaiters.get(index) ?? [];
      list.push(resolve);
      this.arrivalWaiters.set(index, list);
    });
    return Promise.race([arrives, this.whenAvailable(index)]);
  }

  forwarded(index: number): void {
    this.forget(index);
  }

  /** Whether `ref` names the base this version is rebuilt from here. */
  private sameBase(ref: BaseRef): boolean {
    return this.base !== null && this.base.ref.version === ref.version && this.base.ref.digest === ref.digest;
  }

  private keepArrived(index: number, kind: DeltaEncoding, payload: Uint8Array): void {
    if (this.abandoned || this.arrivedBytes + payload.byteLength > KEEP_ARRIVED_BYTES) return;
    this.forget(index);
    this.arrived.set(index, { kind, payload });
    this.arrivedBytes += payload.byteLength;
    const waiting = this.arrivalWaiters.get(index);
    this.arrivalWaiters.delete(index);
    for (const resolve of waiting ?? []) resolve();
  }

  private forget(index: number): void {
    const kept = this.arrived.get(index);
    if (kept === undefined) return;
    this.arrived.delete(index);
    this.arrivedBytes -= kept.payload.byteLength;
  }

  whenAvailable(index: number): Promise<void> {
    if (this.verified[index] === 1) return Promise.resolve();
    if (this.abandoned) return Promise.reject(this.abandoned);
    return new Promise((resolve, reject) => {
      const list = this.waiters.get(index) ?? [];
      list.push({ resolve, reject });
      this.waiters.set(index, list);
    });
  }

  /**
   * Takes chunk `index` from a message: validates it, pulls the bytes into place (or rebuilds
   * them from the base, for a delta `encoding`), verifies them. Never throws: the outcome says
   * what happened (the caller nacks a corrupt chunk, and the sender sends a nacked one full).
   */
  async receive(index: number, incoming: IncomingMessage, linkId: number, lane: PullLane, encoding?: DeltaEncoding): Promise<ChunkOutcome> {
    this.lastActivity = Date.now();
    if (this.abandoned || this.v.state !== 'writing') {
      incoming.release();
      return 'duplicate';
    }
    const landing = this.landingFrom[index]!;
    // Already here, or on its way: decline without moving the bytes. A copy still landing from
    // a link that is no longer the upstream (a stalled predecessor that was skipped, whose link
    // may never report failure) does not block the new upstream's copy.
    if (this.verified[index] === 1 || (landing !== 0 && (landing === linkId || landing === this.currentUpstream))) {
      incoming.release();
      this.metrics.duplicateChunks.inc();
      return 'duplicate';
    }
    const { offset, length } = chunkRange(this.v.layout, index);
    this.landingFrom[index] = linkId;
    const generation = ++this.generation[index]!;
    const superseded = (): boolean => this.generation[index] !== generation;
    try {
      const wireBytes = encoding === undefined ? length : incoming.length;
      const take = (into: Mapping | Uint8Array, at: number): Promise<boolean> => {
        if (!superseded()) return incoming.receiveInto(into, at).then(() => true);
        incoming.release();
        return Promise.resolve(false);
      };
      // A payload that came inline (a small delta: inline.ts) is here already: it moves
      // nothing on the link, so it need not wait behind the link's pulls.
      const pull = (into: Mapping | Uint8Array, at: number): Promise<boolean> => (incoming.pending ? lane.run(() => take(into, at)) : take(into, at));
      let sum: string | null = null;
      if (encoding === undefined) {
        const mapping = await this.segment();
        if (mapping === null) {
          incoming.release();
          return 'duplicate';
        }
        await this.rebuildSettled(index); // a superseded arrival's, started before this one: see exclusiveWrite
        await pull(mapping, offset);
        if (!superseded()) sum = checksumHex(await mapping.checksumAsync(offset, length));
      } else {
        // The rebuild hashes the chunk as it writes it: no second read to verify it.
        const keep = (payload: Uint8Array): void => {
          if (!superseded()) this.keepArrived(index, encoding, payload);
        };
        const target = { layout: this.v.layout, write: (write: (mapping: Mapping) => Promise<bigint>) => this.exclusiveWrite(index, superseded, write) };
        const rebuilt = await rebuildChunk(encoding, index, incoming, this.base!.v, target, (into) => pull(into, 0), keep);
        if (rebuilt !== null) sum = checksumHex(rebuilt);
      }
      if (sum === null || superseded()) return 'duplicate';
      this.metrics.chunkBytesReceived.inc(wireBytes);
      this.metrics.bytes.received += wireBytes;
      if (sum !== this.checksums[index]) {
        if (encoding !== undefined) this.forget(index); // the successor verifies its own rebuild, and asks us for the full chunk
        this.metrics.corruptChunks.inc();
        if (encoding !== undefined) this.metrics.deltaFallbacks.inc({ reason: 'checksum' });
        this.log.warn({ model: this.v.model, version: this.v.version, chunk: index, encoding: encoding ?? 'full' }, 'chunk failed its checksum: asking again');
        return 'corrupt';
      }
      this.metrics.countDelta('in', encoding ?? 'full', length, wireBytes);
    } catch (err) {
      if ((err as LaminarError).code === ErrorCodes.DELTA_CORRUPT && !superseded()) {
        this.forget(index);
        // Nothing decoded is kept: the chunk is not marked verified, and its full copy is asked for.
        this.metrics.deltaFallbacks.inc({ reason: 'decode' });
        this.log.warn(
          { model: this.v.model, version: this.v.version, chunk: index, err: (err as Error).message },
          'a delta did not decode: asking for the full chunk',
        );
        return 'corrupt';
      }
      this.log.debug({ err, chunk: index }, 'chunk receive failed');
      return superseded() ? 'duplicate' : 'failed';
    } finally {
      if (!superseded()) this.landingFrom[index] = 0;
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- abandon() may have run during the awaits above; the narrowing from the check at the top does not survive them
    if (this.abandoned || this.verified[index] === 1) return 'duplicate';
    this.verified[index] = 1;
    this.verifiedCount++;
    this.metrics.chunksReceived.inc();
    while (this.hwmValue < this.verified.length && this.verified[this.hwmValue] === 1) this.hwmValue++;
    this.arrivalWaiters.delete(index); // settled by the waiters below
    const waiting = this.waiters.get(index);
    if (waiting) {
      this.waiters.delete(index);
      for (const w of waiting) w.resolve();
    }
    if (this.verifiedCount === this.v.layout.chunkCount) await this.finish();
    return 'verified';
  }

  private async finish(): Promise<void> {
    try {
      await this.rebuildsSettled(); // nothing writes into a version once it is served
      await this.store.completeReceived(this.v, this.checksums);
      this.resolveDone();
    } catch (err) {
      this.log.error({ err, model: this.v.model, version: this.v.version }, 'could not complete a received version');
      await this.abandon('completion failed');
    }
  }

  /** Gives up on the version: the partial segment is deleted, waiting senders are told. */
  async abandon(reason: string): Promise<void> {
    if (this.abandoned) return;
    this.abandoned = new LaminarError(ErrorCodes.TRANSFER_ABANDONED, `receiving ${this.v.model} v${this.v.version} was abandoned: ${reason}`);
    // A segment still being set up is discarded once it is (or once that failed): never under it.
    const settled = this.ready.catch(() => undefined);
    for (const list of this.waiters.values()) for (const w of list) w.reject(this.abandoned);
    this.waiters.clear();
    this.arrivalWaiters.clear(); // their races settle through the waiters above
    this.arrived.clear();
    this.arrivedBytes = 0;
    this.rejectDone(this.abandoned);
    await settled;
    await this.rebuildsSettled(); // the segment goes, and its mapping with it
    await this.store.abandonReceive(this.v, reason);
  }
}
