/**
 * Committing a version: what writers report as written (with their checksums), the single read
 * at commit that checks those and computes the chunk checksums, sealing the segment (header with
 * the real checksums, renamed from `.writing` to complete, read-only) and marking it complete.
 * The checksum work is here, apart from the store's life-cycle rules, because it is the part
 * that touches every byte and has rules of its own (the three forms a writer may report
 * checksums in).
 */
import { chmod, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { ErrorCodes, IntegrityError, InvalidInputError } from '../../common/errors.js';
import { Mapping } from '../../native/index.js';
import { chunkAlignedParts, encodeHeader } from '../../safetensors/header.js';
import { chunkChecksums } from '../chunk-checksums.js';
import { checkPublication, type WriterPiece } from '../commit-check.js';
import type { RelayMetrics } from '../metrics.js';
import { COMPLETE_SUFFIX } from '../segments.js';
import type { StoredVersion } from './stored-version.js';

/**
 * What a writer reports for a tensor: one XXH3 of the whole tensor (checksum), one per pieceSize
 * bytes of it, or one per part of it in each chunk it spans (chunkAligned: what laminar's own
 * writers send, checked in commit's single read).
 */
export interface WrittenReport {
  name: string;
  checksum?: string | null | undefined;
  pieceSize?: number | undefined;
  pieces?: string[] | undefined;
  chunkAligned?: boolean | undefined;
}

/** The byte ranges and checksums a writer reported for one tensor of `v`; null without checksums. */
export function writerChecksum(v: StoredVersion, t: WrittenReport): WriterPiece[] | null {
  const entry = v.tensor(t.name);
  if (!entry) throw new InvalidInputError(ErrorCodes.UNKNOWN_TENSOR, `version ${v.version} of ${v.model} has no tensor ${JSON.stringify(t.name)}`);
  const sums = t.pieces ?? (t.checksum != null ? [t.checksum] : null);
  if (sums === null) return null;
  let ranges: { offset: number; length: number }[];
  let unit: string;
  if (t.pieces && t.chunkAligned) {
    if (t.pieceSize !== undefined)
      throw new InvalidInputError(ErrorCodes.BAD_REQUEST, `checksums of ${JSON.stringify(t.name)} are either chunkAligned or per pieceSize, not both`);
    ranges = chunkAlignedParts(v.layout, entry.offset, entry.byteLength);
    unit = 'part in each chunk the tensor spans';
  } else {
    const pieceSize = t.pieces ? (t.pieceSize ?? 0) : Math.max(entry.byteLength, 1);
    if (!(pieceSize > 0)) throw new InvalidInputError(ErrorCodes.BAD_REQUEST, `checksums of ${JSON.stringify(t.name)} need a pieceSize (or chunkAligned)`);
    const count = entry.byteLength === 0 ? 1 : Math.ceil(entry.byteLength / pieceSize);
    ranges = Array.from({ length: count }, (_, i) => ({
      offset: entry.offset + i * pieceSize,
      length: Math.min(pieceSize, entry.byteLength - i * pieceSize),
    }));
    unit = `${pieceSize} bytes`;
  }
  if (sums.length !== ranges.length || !sums.every((s) => /^[0-9a-f]{16}$/.test(s))) {
    throw new InvalidInputError(ErrorCodes.BAD_REQUEST, `checksums of ${JSON.stringify(t.name)} must be 16 hex digits, one per ${unit} (${ranges.length})`);
  }
  return ranges.map((r, i) => ({ offset: r.offset, length: r.length, sum: sums[i]! }));
}

/** Refuses a commit while tensors of `v` are not reported written. */
export function assertAllWritten(v: StoredVersion): void {
  const missing = v.layout.tensors.filter((t) => !v.written.has(t.name)).map((t) => t.name);
  if (missing.length > 0) {
    throw new IntegrityError(
      ErrorCodes.INCOMPLETE,
      `${missing.length} tensor(s) not written: ${missing.slice(0, 10).join(', ')}${missing.length > 10 ? ', ...' : ''}`,
      { details: { missing: missing.slice(0, 100) } },
    );
  }
}

/**
 * Reads `v` once: checks the writers' checksums and computes the chunk checksums. A tensor whose
 * bytes differ from what its writer checksummed is forgotten (so the writer can write it again)
 * and the commit refused.
 */
export async function checkWrittenVersion(v: StoredVersion, concurrency: number, metrics: RelayMetrics): Promise<string[]> {
  const check = await checkPublication(v.mapping!, v.layout, v.written, concurrency);
  metrics.checksumBytes.inc(check.bytesRead);
  const mismatched = v.layout.tensors.filter((t) => check.mismatched.has(t.name)).map((t) => t.name);
  if (mismatched.length > 0) {
    for (const name of mismatched) v.written.delete(name);
    throw new IntegrityError(
      ErrorCodes.CHECKSUM_MISMATCH,
      `bytes of ${mismatched.length} tensor(s) differ from what their writer checksummed: ${mismatched.slice(0, 10).join(', ')}`,
      { details: { mismatched: mismatched.slice(0, 100) } },
    );
  }
  return check.checksums;
}

/** The checksum of every chunk of `v`, read from its mapping. */
export async function computeChunkChecksums(v: StoredVersion, concurrency: number, metrics: RelayMetrics): Promise<string[]> {
  const sums = await chunkChecksums(v.mapping!, v.layout, concurrency);
  metrics.checksumBytes.inc(v.layout.dataLength);
  return sums;
}

/** Chunk indices of `v` whose bytes do not match `expected`. */
export async function badChunks(v: StoredVersion, expected: readonly string[], concurrency: number, metrics: RelayMetrics): Promise<number[]> {
  const actual = await computeChunkChecksums(v, concurrency, metrics);
  return actual.flatMap((sum, i) => (sum === expected[i] ? [] : [i]));
}

/** Writes `v`'s safetensors header, with `checksums` in its laminar metadata, over the start of its segment. */
export function writeHeader(v: StoredVersion, checksums: string[]): void {
  const header = encodeHeader(v.layout, { model: v.model, version: v.version, chunkSize: v.layout.chunkSize, checksums }, v.metadata);
  new Uint8Array(v.mapping!.view(0, header.byteLength)).set(header);
}

/**
 * Makes `v`'s segment complete on disk: its header rewritten with the real checksums (unless it
 * came verbatim from a sender), the file renamed from `.writing` and made read-only, mapped
 * read-only again. `v` is still not served: markComplete() does that, once the store has made
 * its version directory.
 */
export async function sealSegment(v: StoredVersion, checksums: string[], dir: { shmDir: string; fileMode: number }, rewriteHeader: boolean): Promise<void> {
  if (rewriteHeader) writeHeader(v, checksums);
  const finalPath = join(dir.shmDir, v.baseName + COMPLETE_SUFFIX);
  await rename(v.path, finalPath);
  // Read-only from now on: a stale writer mapping cannot be reopened for writing.
  await chmod(finalPath, dir.fileMode & 0o444).catch(() => undefined);
  v.path = finalPath;
  void v.mapping!.closeAsync();
  v.mapping = new Mapping(finalPath, { writable: false });
}

/** `v`, sealed, is complete from now on; the store does the rest of the transition. */
export function markComplete(v: StoredVersion, checksums: string[]): void {
  v.checksums = checksums;
  v.state = 'complete';
  v.completedAt = Date.now();
  v.owner = null;
}
