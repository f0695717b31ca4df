/**
 * One part of a version published from several hosts, laid out for a push (relay/parts/): this
 * host's tensors packed in the version's order, checksummed in the pieces the version's chunk
 * grid cuts them into, and the whole version's header (with placeholder chunk checksums: the
 * relay that assembles the parts computes the real ones) to offer with the piece checksums.
 */
import { mapLimit } from '../../common/concurrency.js';
import { checksumHex, Mapping } from '../../native/index.js';
import { encodeHeader, planLayout, type ChunkLayout, type TensorSpec, type VersionLayout } from '../../safetensors/header.js';
import { checkPartOf, packedBytes, packedPlaces, partPieces, tensorRuns, type PartOf, type PartPiece, type TensorRun } from '../parts/part-plan.js';
import { validateModelId, validateVersion } from '../segments.js';
import { writeChunkAligned } from './chunk-aligned-write.js';
import type { TensorData } from './publication.js';
import { sizedBytes } from './tensor-view.js';

/** A part of a version: this host's tensors, and the whole version's tensor list. */
export interface TensorPart {
  model: string;
  version: number;
  part: PartOf;
  /** Every tensor of the version, in the version's order (the same list on every part's host). */
  manifest: readonly TensorSpec[];
  /** The tensors this host holds (any order; each one of the manifest's). */
  tensors: { name: string; dtype: TensorSpec['dtype']; shape: number[]; data: TensorData }[];
  /** The version's metadata: the same on every part. */
  metadata?: Record<string, string>;
}

export interface PreparedPart {
  readonly model: string;
  readonly version: number;
  readonly part: PartOf;
  readonly layout: VersionLayout;
  readonly runs: TensorRun[];
  readonly pieces: PartPiece[];
  /** The packed bytes of this part's tensors. */
  readonly mapping: Mapping;
  /** The offer's payload: the version's header, then one u64 LE XXH3-64 per piece. */
  readonly offerPayload: Buffer;
  close(): void;
}

const CHECKSUM_CONCURRENCY = 4;

/** The whole version's layout, as every part's host plans it (and one publisher of all would). */
export function planVersion(
  model: string,
  version: number,
  manifest: readonly TensorSpec[],
  metadata: Record<string, string>,
  chunking: ChunkLayout,
): VersionLayout {
  return planLayout(
    manifest.map(({ name, dtype, shape }) => ({ name, dtype, shape: [...shape] })),
    { model: validateModelId(model), version: validateVersion(version), ...chunking, extraMetadata: metadata },
  );
}

/** Copies this host's tensors into private memory, packed, and checksums them in pieces. */
export async function preparePart(request: TensorPart, chunking: ChunkLayout): Promise<PreparedPart> {
  checkPartOf(request.part);
  const metadata = request.metadata ?? {};
  const layout = planVersion(request.model, request.version, request.manifest, metadata, chunking);
  const runs = tensorRuns(layout, request.tensors);
  const pieces = partPieces(layout, runs);
  const places = packedPlaces(layout, runs);
  const indexOf = new Map(layout.tensors.map((t, i) => [t.name, i]));
  const mapping = new Mapping(null, { size: Math.max(packedBytes(pieces), 4096) });
  try {
    // Each tensor copied on the pool in runs of whole chunks; a piece that one tensor's copy
    // covers takes its checksum from the copy, the others (where tensors meet) are read.
    const written = await Promise.all(
      request.tensors.map((t) => {
        const index = indexOf.get(t.name)!;
        const entry = layout.tensors[index]!;
        const bytes = sizedBytes(t, entry.byteLength);
        const place = places.get(index)!;
        return writeChunkAligned(mapping, place.grid, place.packed, bytes);
      }),
    );
    const copied = new Map<number, { length: number; sum: bigint }>();
    for (const part of written.flat()) if (part.length > 0) copied.set(part.offset, part);
    const sums = await mapLimit(pieces, CHECKSUM_CONCURRENCY, async (piece) => {
      // A copied part that starts and ends where the piece does is the piece.
      const copy = copied.get(piece.packed);
      return copy !== undefined && copy.length === piece.length ? copy.sum : await mapping.checksumAsync(piece.packed, piece.length);
    });
    const header = encodeHeader(
      layout,
      { model: request.model, version: request.version, chunkSize: layout.chunkSize, checksums: placeholderChecksums(layout) },
      metadata,
    );
    const offerPayload = Buffer.allocUnsafe(header.byteLength + 8 * pieces.length);
    header.copy(offerPayload, 0);
    sums.forEach((sum, i) => offerPayload.writeBigUInt64LE(sum, header.byteLength + 8 * i));
    return {
      model: request.model,
      version: request.version,
      part: request.part,
      layout,
      runs,
      pieces,
      mapping,
      offerPayload,
      close: () => void mapping.closeAsync(),
    };
  } catch (err) {
    void mapping.closeAsync();
    throw err;
  }
}

/** The placeholder chunk checksums of a part's header (the assembling relay writes the real ones). */
export function placeholderChecksums(layout: Pick<VersionLayout, 'chunkCount'>): string[] {
  return new Array<string>(layout.chunkCount).fill('0'.repeat(16));
}

/** Hex checksums of a prepared part's pieces, from its offer payload (tests). */
export function pieceChecksums(prepared: PreparedPart): string[] {
  const start = prepared.offerPayload.byteLength - 8 * prepared.pieces.length;
  return prepared.pieces.map((_, i) => checksumHex(prepared.offerPayload.readBigUInt64LE(start + 8 * i)));
}
