/**
 * One weight version the relay holds: its layout, its segment file and mapping, its state and
 * leases. A type of its own so that every part of the store (recovery, commit, retention,
 * acquire) and the broadcast can use it without reaching into the store's machinery.
 */
import type { Mapping } from '../../native/index.js';
import type { TensorEntry, VersionLayout } from '../../safetensors/header.js';
import type { WriterPiece } from '../commit-check.js';
import { loraBaseOf, versionKind } from '../lora/metadata.js';
import type { VersionInfo, VersionState } from '../protocol/status.js';

export type { VersionInfo, VersionState };

/** Who asked: a connection id (for ownership and leases) or null for the relay itself. */
export type Requester = number | null;

/** Metadata key of a version derived on this relay from another (its FP8 variant, src/relay/fp8/). */
export const VARIANT_KEY = 'laminar.variant';
/**
 * Metadata key of a variant made at the head of the chain for the chain (`--fp8-broadcast`,
 * src/relay/fp8/broadcast.ts): a version like a published one on every relay (broadcast,
 * listed, kept across a restart), not a cache of the relay that holds it.
 */
export const BROADCAST_VARIANT_KEY = 'laminar.variant.broadcast';

export class StoredVersion {
  state: VersionState = 'writing';
  checksums: string[] | null = null;
  /** Tensors reported written, with the writer's checksums of their bytes when it gave them. */
  readonly written = new Map<string, WriterPiece[] | null>();
  leases = 0;
  pinned = false;
  committing = false;
  completedAt: number | null = null;
  /** Its version directory (store/version-dirs.ts) while that exists; null before, after, or when it could not be made. */
  dir: string | null = null;
  readonly createdAt = Date.now();
  /** A variant derived here (VARIANT_KEY): this relay's own, made again on request after a restart. A broadcast one is not. */
  get derived(): boolean {
    return this.metadata[VARIANT_KEY] !== undefined && this.metadata[BROADCAST_VARIANT_KEY] === undefined;
  }
  private readonly tensorIndex: Map<string, TensorEntry>;

  constructor(
    readonly model: string,
    readonly version: number,
    readonly layout: VersionLayout,
    readonly metadata: Record<string, string>,
    readonly baseName: string,
    public path: string,
    public mapping: Mapping | null,
    public owner: Requester,
  ) {
    this.tensorIndex = new Map(layout.tensors.map((t) => [t.name, t]));
  }

  get segment(): string {
    return this.path.slice(this.path.lastIndexOf('/') + 1);
  }

  tensor(name: string): TensorEntry | undefined {
    return this.tensorIndex.get(name);
  }

  info(): VersionInfo {
    return {
      model: this.model,
      version: this.version,
      // A commit reading it: committed by its writer, not served yet.
      state: this.state === 'writing' && this.committing ? 'verifying' : this.state,
      kind: versionKind(this.metadata),
      base: loraBaseOf(this.metadata),
      segment: this.segment,
      path: this.path,
      dir: this.dir,
      size: this.layout.totalSize,
      leases: this.leases,
      pinned: this.pinned,
      createdAt: this.createdAt,
      completedAt: this.completedAt,
    };
  }
}

/** A map key for one version of one model. */
export function versionKey(model: string, version: number): string {
  return `${model}\u0000${version}`;
}
