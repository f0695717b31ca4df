/**
 * The master's side of a version published in parts: several publishers (one per trainer host)
 * each offer a part (part-offer) and send its pieces at once, over links of their own; the relay
 * lays the version out at the first offer, lands every piece at its place in the segment,
 * verifies it against its publisher's checksum, and completes the version (header written with
 * the chunk checksums, sealed, served, broadcast) only once every part is in and verified.
 *
 * What is never served: a version missing a part. A part's publisher whose link dies before its
 * part is in, `--partial-ttl` without a byte from any part, a newer version completing, or parts
 * that together miss a tensor discard the whole version, and every part still pushing is told
 * why (a decline with ERR_PART_LOST, ERR_PART_EXPIRED, ERR_SUPERSEDED or ERR_PART_MISSING). A
 * part that disagrees with those already offered (another header, another part count, a tensor
 * or part index already held) is refused alone (ERR_PART_MISMATCH, ERR_PART_OVERLAP).
 */
import type { Logger } from 'pino';
import { mapLimit } from '../../common/concurrency.js';
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import { checksumHex } from '../../native/index.js';
import { chunkRange, MAX_HEADER_BYTES, type VersionLayout } from '../../safetensors/header.js';
import type { IncomingMessage } from '../../ucx/index.js';
import { inBackground } from '../background.js';
import { PullLane } from '../broadcast/incoming.js';
import type { PeerLink } from '../broadcast/link.js';
import type { PeerMessageOf } from '../broadcast/messages.js';
import type { BroadcastMetrics } from '../broadcast/metrics.js';
import { transferKey } from '../broadcast/outgoing.js';
import type { MappingRegistrations } from '../broadcast/registrations.js';
import { parseOffered, type StoredVersion, type VersionStore } from '../store.js';
import { checkRuns, chunkSumsFromPieces, partPieces, runIndices, type PartPiece } from './part-plan.js';

/** The most pieces one part may announce (its checksums travel in the offer's payload). */
const MAX_PIECES = 16 * 1024 * 1024;
/** Checksum jobs at once when the chunks where parts meet are read at completion. */
const READ_CONCURRENCY = 4;

export interface AssemblyContext {
  store: VersionStore;
  metrics: BroadcastMetrics;
  log: Logger;
  registrations: MappingRegistrations;
  /** A partial version nobody sends anything to for this long is discarded (`--partial-ttl`). */
  partialTtlMs: number;
}

interface Part {
  readonly index: number;
  readonly link: PeerLink;
  readonly pieces: PartPiece[];
  readonly sums: string[];
  readonly verified: Uint8Array;
  readonly landing: Uint8Array;
  verifiedCount: number;
  readonly lane: PullLane;
}

class Assembly {
  readonly parts = new Map<number, Part>();
  /** Which part holds each tensor index. */
  readonly owners = new Map<number, number>();
  lastActivity = Date.now();
  finished = false;
  readonly started = performance.now();

  constructor(
    readonly v: StoredVersion,
    readonly header: Buffer,
    readonly count: number,
  ) {}

  get layout(): VersionLayout {
    return this.v.layout;
  }

  /** Every part offered and every piece of each verified. */
  get complete(): boolean {
    if (this.parts.size < this.count) return false;
    for (const part of this.parts.values()) if (part.verifiedCount < part.pieces.length) return false;
    return true;
  }
}

export class PartAssembler {
  private readonly assemblies = new Map<string, Assembly>();
  /** First offers whose segment is being set up: later parts of the version wait for it. */
  private readonly settingUp = new Map<string, Promise<Assembly | null>>();
  private readonly partsOf = new Map<PeerLink, Map<string, Part>>();
  private readonly failures: { failures: BroadcastMetrics['backgroundFailures'] };

  constructor(private readonly ctx: AssemblyContext) {
    this.failures = { failures: ctx.metrics.backgroundFailures };
  }

  /** True while a version is being assembled here. */
  get busy(): boolean {
    return this.assemblies.size > 0 || this.settingUp.size > 0;
  }

  /** Takes a part-offer (declining what it cannot take). */
  async offer(link: PeerLink, offer: PeerMessageOf<'part-offer'>, incoming: IncomingMessage): Promise<void> {
    const k = transferKey(offer.model, offer.version);
    const decline = (code: string, message: string, result = 'refused'): void => {
      this.ctx.metrics.partVersions.inc({ result });
      this.ctx.log.warn({ peer: link.peerId, model: offer.model, version: offer.version, part: offer.part, code }, `part refused: ${message}`);
      void link.send({ t: 'decline', model: offer.model, version: offer.version, code, message }).catch(() => undefined);
    };
    const payloadBytes = offer.headerBytes + 8 * offer.pieces;
    if (
      offer.pieces > MAX_PIECES ||
      incoming.length !== payloadBytes ||
      offer.headerBytes > MAX_HEADER_BYTES + 8 ||
      offer.headerBytes >= offer.size ||
      offer.part >= offer.parts
    ) {
      incoming.release();
      this.ctx.metrics.badMessages.inc({ code: ErrorCodes.PEER_BAD_OFFER });
      decline(
        ErrorCodes.PEER_BAD_OFFER,
        `part ${offer.part} of ${offer.parts} with ${incoming.length} payload bytes for a ${offer.headerBytes}-byte header and ${offer.pieces} pieces`,
      );
      return;
    }
    const payload = Buffer.allocUnsafe(payloadBytes);
    try {
      await incoming.receiveInto(payload, 0);
    } catch (err) {
      this.ctx.log.debug({ err, peer: link.peerId }, 'part offer payload lost');
      return;
    }
    const header = payload.subarray(0, offer.headerBytes);
    const sums = Array.from({ length: offer.pieces }, (_, i) =>
      payload
        .readBigUInt64LE(offer.headerBytes + 8 * i)
        .toString(16)
        .padStart(16, '0'),
    );

    let assembly: Assembly | null;
    try {
      assembly = await this.assemblyFor(k, offer, header);
    } catch (err) {
      const code = (err as { code?: string }).code ?? ErrorCodes.INTERNAL;
      if (code === ErrorCodes.VERSION_EXISTS) {
        const held = this.ctx.store.list().find((v) => v.model === offer.model && v.version === offer.version);
        decline(code, (err as Error).message);
        if (held)
          void link.send({ t: 'progress', model: offer.model, version: offer.version, hwm: held.layout.chunkCount, complete: true }).catch(() => undefined);
        return;
      }
      decline(code, (err as Error).message);
      return;
    }
    if (assembly === null) {
      decline(ErrorCodes.BUSY, 'the version is being set up from another offer; offer again');
      return;
    }
    if (assembly.finished) {
      decline(ErrorCodes.TRANSFER_ABANDONED, 'the version was discarded while this part was offered');
      return;
    }
    if (!assembly.header.equals(header) || assembly.count !== offer.parts) {
      decline(
        ErrorCodes.PART_MISMATCH,
        assembly.count !== offer.parts
          ? `this part says the version has ${offer.parts} parts, the parts before it said ${assembly.count}`
          : 'this part lays the version out otherwise than the parts before it (model, tensors, dtypes, shapes, chunk size or metadata differ)',
      );
      return;
    }
    let pieces: PartPiece[];
    let indices: number[];
    try {
      checkRuns(offer.runs, assembly.layout.tensors.length);
      indices = runIndices(offer.runs);
      pieces = partPieces(assembly.layout, offer.runs);
    } catch (err) {
      decline((err as LaminarError).code, (err as Error).message);
      return;
    }
    if (pieces.length !== offer.pieces) {
      decline(ErrorCodes.PEER_BAD_OFFER, `the part's tensors make ${pieces.length} pieces, ${offer.pieces} announced`);
      return;
    }
    if (assembly.parts.has(offer.part)) {
      decline(ErrorCodes.PART_OVERLAP, `part ${offer.part + 1} of ${offer.parts} is offered already`);
      return;
    }
    const taken = indices.filter((i) => assembly.owners.has(i));
    if (taken.length > 0) {
      const names = taken.slice(0, 10).map((i) => assembly.layout.tensors[i]!.name);
      decline(ErrorCodes.PART_OVERLAP, `${taken.length} tensor(s) of this part are held by another part already: ${names.join(', ')}`);
      return;
    }
    const part: Part = {
      index: offer.part,
      link,
      pieces,
      sums,
      verified: new Uint8Array(pieces.length),
      landing: new Uint8Array(pieces.length),
      verifiedCount: 0,
      lane: new PullLane(),
    };
    assembly.parts.set(part.index, part);
    for (const i of indices) assembly.owners.set(i, part.index);
    let ofLink = this.partsOf.get(link);
    if (ofLink === undefined) this.partsOf.set(link, (ofLink = new Map<string, Part>()));
    ofLink.set(k, part);
    assembly.lastActivity = Date.now();
    this.ctx.log.info(
      { peer: link.peerId, model: offer.model, version: offer.version, part: offer.part, parts: offer.parts, pieces: pieces.length },
      'receiving a part',
    );
    void link.send({ t: 'accept', model: offer.model, version: offer.version, from: 0, have: [] }).catch(() => undefined);
    if (assembly.parts.size === assembly.count && assembly.owners.size < assembly.layout.tensors.length) {
      const missing = assembly.layout.tensors.filter((_, i) => !assembly.owners.has(i)).map((t) => t.name);
      this.fail(
        assembly,
        ErrorCodes.PART_MISSING,
        `all ${assembly.count} parts are offered, but ${missing.length} tensor(s) are in none: ${missing.slice(0, 10).join(', ')}`,
        'missing',
      );
      return;
    }
    // A part of empty tensors only has nothing to send.
    if (pieces.length === 0) this.partDone(assembly, part);
  }

  /**
   * Takes a chunk message when it is a piece of a part this link offered; false when it is not
   * (a whole version's chunk, for the broadcast's own arrivals).
   */
  chunk(link: PeerLink, chunk: PeerMessageOf<'chunk'>, incoming: IncomingMessage): boolean {
    const k = transferKey(chunk.model, chunk.version);
    const part = this.partsOf.get(link)?.get(k);
    const assembly = this.assemblies.get(k);
    if (part === undefined || assembly === undefined || assembly.parts.get(part.index) !== part) return false;
    const piece = part.pieces[chunk.index];
    const reject = (code: string, message: string): void => {
      incoming.release();
      this.ctx.metrics.badMessages.inc({ code });
      void link.send({ t: 'error', code, message }).catch(() => undefined);
    };
    if (piece === undefined) {
      reject(ErrorCodes.CHUNK_OUT_OF_RANGE, `piece ${chunk.index} of a part with ${part.pieces.length} pieces`);
      return true;
    }
    if (incoming.length !== piece.length || incoming.data !== undefined || incoming.dropped) {
      reject(ErrorCodes.CHUNK_LENGTH, `piece ${chunk.index} carries ${incoming.length} bytes, expected ${piece.length} by rendezvous`);
      return true;
    }
    assembly.lastActivity = Date.now();
    if (assembly.finished || part.verified[chunk.index] === 1 || part.landing[chunk.index] === 1) {
      incoming.release();
      this.ctx.metrics.duplicateChunks.inc();
      return true;
    }
    inBackground(this.receive(assembly, part, chunk.index, piece, incoming), this.ctx.log, 'receiving a piece', this.failures);
    return true;
  }

  /** A link closed: the parts it had not delivered yet are lost, and their versions with them. */
  linkGone(link: PeerLink, code: string | undefined): void {
    const parts = this.partsOf.get(link);
    this.partsOf.delete(link);
    for (const [k, part] of parts ?? []) {
      const assembly = this.assemblies.get(k);
      if (assembly === undefined || assembly.finished || part.verifiedCount === part.pieces.length) continue;
      this.fail(
        assembly,
        ErrorCodes.PART_LOST,
        `the publisher of part ${part.index + 1} of ${assembly.count} (${link.peerId}) was lost before its part was in${code ? ` (${code})` : ''}`,
        'part_lost',
      );
    }
  }

  /**
   * Every second or so: discards versions no part sent anything to for `--partial-ttl`, and
   * tells the publishers whose part is in that the relay is still at it (their wait for the
   * version's completion is held to their stall limit, while other parts may take longer).
   */
  tick(now: number): void {
    for (const assembly of this.assemblies.values()) {
      if (now - assembly.lastActivity > this.ctx.partialTtlMs) {
        this.fail(assembly, ErrorCodes.PART_EXPIRED, `no part of the version sent anything for ${this.ctx.partialTtlMs} ms`, 'expired');
        continue;
      }
      for (const part of assembly.parts.values()) {
        if (part.verifiedCount < part.pieces.length) continue;
        void part.link
          .send({ t: 'progress', model: assembly.v.model, version: assembly.v.version, hwm: part.pieces.length, complete: false })
          .catch(() => undefined);
      }
    }
  }

  /** A newer version of the model is complete here: older partial ones are pointless. */
  abandonOlderThan(v: StoredVersion): void {
    for (const assembly of [...this.assemblies.values()]) {
      if (assembly.v.model === v.model && assembly.v.version < v.version) {
        this.fail(assembly, ErrorCodes.SUPERSEDED, `version ${v.version} is complete`, 'superseded');
      }
    }
  }

  /** The relay stops: partial versions go (the store discards them), their publishers are told. */
  close(): void {
    for (const assembly of [...this.assemblies.values()]) this.fail(assembly, ErrorCodes.RELAY_STOPPING, 'the relay is stopping', 'failed');
  }

  /**
   * The version's assembly: the one under way, or a new one set up from this first offer (its
   * segment allocated with the offered header). Null when another first offer's setup failed.
   */
  private async assemblyFor(k: string, offer: PeerMessageOf<'part-offer'>, header: Buffer): Promise<Assembly | null> {
    const existing = this.assemblies.get(k);
    if (existing) return existing;
    const pending = this.settingUp.get(k);
    if (pending) return pending;
    const setUp = (async (): Promise<Assembly> => {
      const { store } = this.ctx;
      const held = store.list().find((v) => v.model === offer.model && v.version === offer.version);
      if (held?.state === 'complete') throw new LaminarError(ErrorCodes.VERSION_EXISTS, 'this relay already holds the version');
      const latest = store.latest(offer.model);
      if (latest !== null && latest.version > offer.version) {
        throw new LaminarError(ErrorCodes.VERSION_STALE, `this relay holds the newer version ${latest.version}`);
      }
      if (held) throw new LaminarError(ErrorCodes.BUSY, 'the version is being received or written otherwise; offer again');
      const offered = parseOffered(header, offer.size, { model: offer.model, version: offer.version });
      const v = await store.beginReceive(offered);
      const assembly = new Assembly(v, Buffer.from(header), offer.parts);
      if (v.mapping !== null) this.ctx.registrations.registerOnce(v.mapping);
      this.assemblies.set(k, assembly);
      return assembly;
    })();
    this.settingUp.set(
      k,
      setUp.catch(() => null),
    );
    try {
      return await setUp;
    } finally {
      this.settingUp.delete(k);
    }
  }

  private async receive(assembly: Assembly, part: Part, index: number, piece: PartPiece, incoming: IncomingMessage): Promise<void> {
    part.landing[index] = 1;
    let sum: string;
    try {
      const mapping = assembly.v.mapping;
      if (mapping === null) {
        incoming.release();
        return;
      }
      await part.lane.run(() => incoming.receiveInto(mapping, piece.offset));
      if (assembly.finished) return;
      sum = checksumHex(await mapping.checksumAsync(piece.offset, piece.length));
      this.ctx.metrics.chunkBytesReceived.inc(piece.length);
      this.ctx.metrics.bytes.received += piece.length;
    } catch (err) {
      this.ctx.log.debug({ err, piece: index }, 'piece receive failed');
      if (!assembly.finished) this.nack(assembly, part, index);
      return;
    } finally {
      part.landing[index] = 0;
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- fail() may have run during the awaits above
    if (assembly.finished) return;
    if (sum !== part.sums[index]) {
      this.ctx.metrics.corruptChunks.inc();
      this.ctx.log.warn({ model: assembly.v.model, version: assembly.v.version, part: part.index, piece: index }, 'piece failed its checksum: asking again');
      this.nack(assembly, part, index);
      return;
    }
    if (part.verified[index] === 1) return;
    part.verified[index] = 1;
    part.verifiedCount++;
    this.ctx.metrics.chunksReceived.inc();
    if (part.verifiedCount === part.pieces.length) this.partDone(assembly, part);
  }

  private nack(assembly: Assembly, part: Part, index: number): void {
    void part.link.send({ t: 'nack', model: assembly.v.model, version: assembly.v.version, index }).catch(() => undefined);
  }

  private partDone(assembly: Assembly, part: Part): void {
    this.ctx.log.info({ model: assembly.v.model, version: assembly.v.version, part: part.index, parts: assembly.count }, 'part received and verified');
    void part.link
      .send({ t: 'progress', model: assembly.v.model, version: assembly.v.version, hwm: part.pieces.length, complete: false })
      .catch(() => undefined);
    if (assembly.complete) inBackground(this.finish(assembly), this.ctx.log, 'completing a version assembled from parts', this.failures);
  }

  /** Every part is in: the chunk checksums (read only where parts meet), then the version is sealed and served. */
  private async finish(assembly: Assembly): Promise<void> {
    if (assembly.finished) return;
    assembly.finished = true;
    const { v } = assembly;
    const k = transferKey(v.model, v.version);
    try {
      const known = chunkSumsFromPieces(
        v.layout,
        [...assembly.parts.values()].flatMap((p) => p.pieces.map((piece, i) => ({ ...piece, sum: p.sums[i]! }))),
      );
      const mapping = v.mapping!;
      const checksums = await mapLimit(known, READ_CONCURRENCY, async (sum, index) => {
        if (sum !== null) return sum;
        const { offset, length } = chunkRange(v.layout, index);
        return checksumHex(await mapping.checksumAsync(offset, length));
      });
      this.release(assembly, mapping);
      await this.ctx.store.completeAssembled(v, checksums);
    } catch (err) {
      this.ctx.log.error({ err, model: v.model, version: v.version }, 'could not complete a version assembled from parts');
      assembly.finished = false;
      this.fail(assembly, ErrorCodes.INTERNAL, `completing the version failed: ${(err as Error).message}`, 'failed');
      return;
    }
    this.assemblies.delete(k);
    this.forget(assembly);
    this.ctx.metrics.partVersions.inc({ result: 'complete' });
    this.ctx.metrics.transfers.inc({ direction: 'in', result: 'complete' });
    this.ctx.metrics.transferSeconds.observe({ direction: 'in' }, (performance.now() - assembly.started) / 1e3);
    this.ctx.log.info({ model: v.model, version: v.version, parts: assembly.count }, 'version assembled from its parts');
    for (const part of assembly.parts.values()) {
      void part.link.send({ t: 'progress', model: v.model, version: v.version, hwm: part.pieces.length, complete: true }).catch(() => undefined);
    }
  }

  /** Discards the partial version and tells every part's publisher why. */
  private fail(assembly: Assembly, code: string, message: string, result: string): void {
    if (assembly.finished) return;
    assembly.finished = true;
    const { v } = assembly;
    this.assemblies.delete(transferKey(v.model, v.version));
    this.forget(assembly);
    this.ctx.metrics.partVersions.inc({ result });
    this.ctx.metrics.transfers.inc({ direction: 'in', result: 'abandoned' });
    this.ctx.log.warn(
      { model: v.model, version: v.version, code, parts: assembly.count, arrived: assembly.parts.size },
      `version published in parts discarded: ${message}`,
    );
    for (const part of assembly.parts.values()) {
      void part.link.send({ t: 'decline', model: v.model, version: v.version, code, message }).catch(() => undefined);
    }
    if (v.mapping !== null) this.release(assembly, v.mapping);
    inBackground(this.ctx.store.abandonReceive(v, message), this.ctx.log, 'discarding a partial version', this.failures);
  }

  private released = new WeakSet<Assembly>();
  private release(assembly: Assembly, mapping: NonNullable<StoredVersion['mapping']>): void {
    if (this.released.has(assembly)) return;
    this.released.add(assembly);
    this.ctx.registrations.release(mapping);
  }

  private forget(assembly: Assembly): void {
    const k = transferKey(assembly.v.model, assembly.v.version);
    for (const part of assembly.parts.values()) this.partsOf.get(part.link)?.delete(k);
  }
}
