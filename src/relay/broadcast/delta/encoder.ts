/**
 * The sender's half of a delta hop: each chunk of the version being sent, encoded against the
 * sender's own copy of the base the receiver named (base.ts), or left full when the delta would
 * not pay (policy.ts). A chunk that arrived here as a delta against that same base goes on as
 * the payload it arrived as, without an encode (a relay in the middle of the chain). The encodes
 * run on the libuv pool. One per outgoing transfer; it holds a lease on the base for as long as
 * the transfer runs, so that retention cannot retire the bytes the payloads are made from.
 */
import { chunkRange } from '../../../safetensors/header.js';
import type { StoredVersion, VersionStore } from '../../store.js';
import { encodeMappedChunk, type EncodedChunk } from '../../delta/codec.js';
import type { ChunkSource } from '../source.js';
import { matchingBase, type BaseRef } from './base.js';
import { deltaPays, PROBE_EVERY, type DeltaMode, type EncodeMeter } from './policy.js';

export interface ChunkEncoderOptions {
  store: VersionStore;
  mode: Exclude<DeltaMode, 'off'>;
  meter: EncodeMeter;
  /** The link's bandwidth in bytes per second now (the chunk model's input). */
  linkBandwidth(): number;
}

/**
 * An encoder of `source` against the base `ref` names (a receiver's accept), when `store` holds
 * the same (base.ts) and `mode` is not off; null: full chunks. The link's bandwidth for auto is
 * the store's chunk model's. The downstream side and the forwarding relay's push both use it.
 */
export function encoderAgainst(store: VersionStore, source: ChunkSource, ref: BaseRef, mode: DeltaMode, meter: EncodeMeter): ChunkEncoder | null {
  if (mode === 'off' || ref.version >= source.version) return null;
  const base = matchingBase(store, source.model, ref);
  return base === null ? null : new ChunkEncoder(source, base, ref, { store, mode, meter, linkBandwidth: () => store.chunkSizer.inputs().bandwidth });
}

/** A chunk to send: as encoded here, or (`forwarded`) as it arrived from upstream. */
export type ChunkToSend = EncodedChunk & { forwarded?: true };

export class ChunkEncoder {
  private fullSinceProbe = 0;
  private released = false;

  /** Leases `base` until close(). */
  constructor(
    private readonly source: ChunkSource,
    readonly base: StoredVersion,
    /** How the receiver named the base. */
    private readonly ref: BaseRef,
    private readonly options: ChunkEncoderOptions,
  ) {
    options.store.lease(base);
  }

  /** Whether chunk `index` can go now as the delta it arrived as (before this relay verified it). */
  forwardable(index: number): boolean {
    return this.source.arrivedAs?.(index, this.ref) !== undefined;
  }

  /** Resolves once chunk `index` can be sent: forwarded as it arrived, or encoded from the verified chunk. */
  whenSendable(index: number): Promise<void> {
    return this.source.whenForwardable?.(index, this.ref) ?? this.source.whenAvailable(index);
  }

  /**
   * Chunk `index` as it arrived (when it came as a delta against the same base), else encoded
   * against the base (the chunk must be available), or null to send it full without encoding
   * (auto mode on a link where the delta does not pay, or a base no longer mapped).
   */
  async encode(index: number): Promise<ChunkToSend | null> {
    const arrived = this.source.arrivedAs?.(index, this.ref);
    if (arrived !== undefined) {
      // What upstream chose for this hop holds for the next: the same bytes against the same base.
      this.source.forwarded?.(index);
      return { kind: arrived.kind, payload: arrived.payload, forwarded: true };
    }
    const { meter, mode } = this.options;
    if (mode === 'auto' && !deltaPays(meter.measure, this.options.linkBandwidth())) {
      this.fullSinceProbe++;
      if (this.fullSinceProbe < PROBE_EVERY) return null;
    }
    this.fullSinceProbe = 0;
    const baseMapping = this.base.mapping;
    if (this.released || baseMapping === null) return null;
    const at = chunkRange(this.source.layout, index);
    const from = chunkRange(this.base.layout, index);
    const encoded = await encodeMappedChunk({ mapping: baseMapping, offset: from.offset }, { mapping: this.source.mapping, offset: at.offset }, at.length);
    meter.record(at.length, encoded.kind === 'full' ? at.length : encoded.payload.byteLength, encoded.seconds);
    return encoded;
  }

  /** Lets the base go (the transfer ended). */
  close(): void {
    if (this.released) return;
    this.released = true;
    this.options.store.unlease(this.base);
  }
}
