/**
 * The base of a delta: an earlier complete version of the same model, with the same layout, that
 * both ends of a hop hold. The receiver names the one it holds in its accept (version and
 * fingerprint); the sender encodes against its own copy only when the fingerprints agree, so both
 * sides read the same bytes for every chunk without ever comparing them over the wire.
 */
import { createHash } from 'node:crypto';
import type { VersionLayout } from '../../../safetensors/header.js';
import type { StoredVersion, VersionStore } from '../../store.js';

/** What a receiver tells its sender about the base it holds (the accept's `base`). */
export interface BaseRef {
  version: number;
  /** baseFingerprint() of the receiver's copy. */
  digest: string;
}

/**
 * Whether chunk i of `a` and chunk i of `b` hold the same tensors' bytes: the same tensors (name,
 * dtype, shape, place in the data section), data length and chunk size. The header's length may
 * differ (a longer version number): chunks are counted from each layout's own data offset.
 */
export function sameLayout(a: VersionLayout, b: VersionLayout): boolean {
  if (a.chunkSize !== b.chunkSize || a.dataLength !== b.dataLength || a.chunkCount !== b.chunkCount || a.tensors.length !== b.tensors.length) {
    return false;
  }
  for (let i = 0; i < a.tensors.length; i++) {
    const x = a.tensors[i]!;
    const y = b.tensors[i]!;
    if (x.name !== y.name || x.dtype !== y.dtype || x.byteLength !== y.byteLength || x.offset - a.dataOffset !== y.offset - b.dataOffset) return false;
    if (x.shape.length !== y.shape.length || x.shape.some((d, k) => d !== y.shape[k])) return false;
  }
  return true;
}

const fingerprints = new WeakMap<StoredVersion, string>();

/**
 * A digest of a complete version's layout and chunk checksums: two relays whose copies of version
 * B give the same fingerprint hold the same bytes (each copy was verified against those
 * checksums), so a delta against one decodes against the other. Null for a version without
 * checksums (not complete).
 */
export function baseFingerprint(v: StoredVersion): string | null {
  const known = fingerprints.get(v);
  if (known !== undefined) return known;
  if (v.checksums === null) return null;
  const { layout } = v;
  const hash = createHash('sha256');
  hash.update(JSON.stringify([v.model, v.version, layout.chunkSize, layout.dataLength]));
  for (const t of layout.tensors) hash.update(JSON.stringify([t.name, t.dtype, t.shape, t.offset - layout.dataOffset, t.byteLength]));
  hash.update(v.checksums.join(','));
  const digest = hash.digest('hex').slice(0, 32);
  fingerprints.set(v, digest);
  return digest;
}

/**
 * The base this relay can rebuild `layout` (version `version` of `model`) from: its newest
 * complete version of the model before it with the same layout, still mapped; null when there is
 * none (a relay restarted without it, a late one, a layout change): then every chunk comes full.
 */
export function findBase(store: VersionStore, model: string, version: number, layout: VersionLayout): StoredVersion | null {
  let best: StoredVersion | null = null;
  for (const v of store.list()) {
    if (v.model !== model || v.state !== 'complete' || v.version >= version || v.mapping === null) continue;
    if (best === null || v.version > best.version) best = v;
  }
  // Only the newest: an older version of the same layout is further from the new one.
  return best !== null && sameLayout(best.layout, layout) && baseFingerprint(best) !== null ? best : null;
}

/** The sender's copy of the receiver's base: the same version, complete and mapped, with the same fingerprint. */
export function matchingBase(store: VersionStore, model: string, ref: BaseRef): StoredVersion | null {
  const v = store.peek(model, ref.version);
  if (v === undefined || v.state !== 'complete' || v.mapping === null || v.derived) return null;
  return baseFingerprint(v) === ref.digest ? v : null;
}
