/**
 * What a sender reads chunks from: a version complete in the store, one still arriving from
 * upstream (chunks become available as they are verified), or a publisher's local buffer.
 */
import { LaminarError } from '../../common/errors.js';
import type { Mapping } from '../../native/index.js';
import type { VersionLayout } from '../../safetensors/header.js';
import type { StoredVersion } from '../store/stored-version.js';
import { ErrorCodes } from '../../common/error-codes.js';
import type { BaseRef } from './delta/base.js';

/** A chunk as it arrived from upstream: a delta against the arrival's base ('same' carries no bytes). */
export interface ArrivedDelta {
  kind: 'same' | 'sparse';
  payload: Uint8Array;
}

export interface ChunkSource {
  readonly model: string;
  readonly version: number;
  readonly layout: VersionLayout;
  /** The current mapping of the segment (a received version is re-mapped read-only when it completes). */
  readonly mapping: Mapping;
  /**
   * The version's safetensors header (the segment's first `layout.dataOffset` bytes), where the
   * segment may not be mapped yet when the version is offered on: an arrival whose segment is
   * still being set up (incoming.ts). Absent: the header is read from `mapping`.
   */
  readonly header?: Uint8Array;
  /**
   * A part of a version (relay/parts/): what is sent is its pieces, by index, from these ranges
   * of `mapping`, instead of the layout's chunks.
   */
  readonly pieces?: { readonly count: number; range(index: number): { offset: number; length: number } };
  available(index: number): boolean;
  /** Resolves when chunk `index` is available; rejects when the source is abandoned. */
  whenAvailable(index: number): Promise<void>;
  /**
   * A version arriving here (incoming.ts): chunk `index` as the delta it arrived as against the
   * base `ref` names, from the moment its payload is here (before this relay has rebuilt and
   * verified it): what a relay forwards unchanged to a successor that holds the same base.
   * Undefined when it came full, against another base, or was already taken.
   */
  arrivedAs?(index: number, ref: BaseRef): ArrivedDelta | undefined;
  /** Resolves once arrivedAs(index, ref) has the chunk or the chunk is available. */
  whenForwardable?(index: number, ref: BaseRef): Promise<void>;
  /** The successor took chunk `index` as it arrived: its payload need not be kept. */
  forwarded?(index: number): void;
}

/** A version of the store as a source; subclasses say which chunks are there. */
export abstract class VersionSource implements ChunkSource {
  constructor(readonly v: StoredVersion) {}
  get model(): string {
    return this.v.model;
  }
  get version(): number {
    return this.v.version;
  }
  get layout(): VersionLayout {
    return this.v.layout;
  }
  get mapping(): Mapping {
    if (this.v.mapping === null) throw this.gone();
    return this.v.mapping;
  }
  /** The error for a version whose segment is no longer mapped. */
  protected gone(): LaminarError {
    return new LaminarError(ErrorCodes.TRANSFER_ABANDONED, `version ${this.v.version} of ${this.v.model} is no longer mapped`);
  }
  abstract available(index: number): boolean;
  abstract whenAvailable(index: number): Promise<void>;
}

/** A complete version of the store, leased for as long as it is being sent. */
export class StoredSource extends VersionSource {
  available(): boolean {
    return true;
  }
  whenAvailable(): Promise<void> {
    return Promise.resolve();
  }
}
