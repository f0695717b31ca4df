/**
 * Commit's read of a publication: the chunk checksums the version will be served with, and the
 * check of every checksum its writers reported, from one read of the bytes wherever a writer's
 * piece lies inside one chunk (writers cut their pieces at the chunk grid for that reason; see
 * chunkAlignedParts). A piece that straddles chunks is read again on its own.
 *
 * Reading twice (the writers' pieces, then the chunks) was most of a local publish's stall: the
 * trainer waits for commit, and on a host whose memory bandwidth the trainer's own copy just
 * used, each pass costs about as much as that copy.
 */
import { mapLimit } from '../common/concurrency.js';
import { checksumBuffer, checksumHex, type Mapping } from '../native/index.js';
import { chunkRange, type VersionLayout } from '../safetensors/header.js';

/** A range of the segment and what its writer says it hashes to. */
export interface WriterPiece {
  offset: number;
  length: number;
  sum: string;
}

export interface CommitCheck {
  /** One 16-hex-digit XXH3-64 per chunk, from the bytes as they are now. */
  checksums: string[];
  /** Tensors with at least one piece whose bytes differ from what their writer reported. */
  mismatched: ReadonlySet<string>;
  /** Bytes read (a byte of a straddling piece counts twice). */
  bytesRead: number;
}

interface OwnedPiece extends WriterPiece {
  tensor: string;
}

const EMPTY_SUM = checksumHex(checksumBuffer(new Uint8Array(0)));

export async function checkPublication(
  mapping: Mapping,
  layout: Pick<VersionLayout, 'dataOffset' | 'dataLength' | 'chunkSize' | 'chunkCount'>,
  reports: Iterable<[tensor: string, pieces: readonly WriterPiece[] | null]>,
  concurrency: number,
): Promise<CommitCheck> {
  const mismatched = new Set<string>();
  const perChunk: OwnedPiece[][] = Array.from({ length: layout.chunkCount }, () => []);
  const straddling: OwnedPiece[] = [];
  for (const [tensor, pieces] of reports) {
    for (const piece of pieces ?? []) {
      if (piece.length === 0) {
        if (piece.sum !== EMPTY_SUM) mismatched.add(tensor);
        continue;
      }
      const first = Math.floor((piece.offset - layout.dataOffset) / layout.chunkSize);
      const last = Math.floor((piece.offset + piece.length - 1 - layout.dataOffset) / layout.chunkSize);
      (first === last ? perChunk[first]! : straddling).push({ ...piece, tensor });
    }
  }

  const checksums = new Array<string>(layout.chunkCount);
  const jobs: (() => Promise<void>)[] = perChunk.map((pieces, index) => async () => {
    const chunk = chunkRange(layout, index);
    pieces.sort((a, b) => a.offset - b.offset);
    // Cut at every piece boundary inside the chunk; pieces never overlap (tensors are disjoint),
    // so each piece is exactly one part.
    const cuts: number[] = [];
    const partOf = new Map<OwnedPiece, number>();
    for (const piece of pieces) {
      const begin = piece.offset - chunk.offset;
      const end = begin + piece.length;
      if (begin > 0 && cuts[cuts.length - 1] !== begin) cuts.push(begin);
      partOf.set(piece, cuts.length);
      if (end < chunk.length) cuts.push(end);
    }
    const sums = await mapping.checksumPartsAsync(chunk.offset, chunk.length, cuts);
    checksums[index] = checksumHex(sums[0]!);
    for (const piece of pieces) if (checksumHex(sums[1 + partOf.get(piece)!]!) !== piece.sum) mismatched.add(piece.tensor);
  });
  for (const piece of straddling) {
    jobs.push(async () => {
      if (checksumHex(await mapping.checksumAsync(piece.offset, piece.length)) !== piece.sum) mismatched.add(piece.tensor);
    });
  }
  await mapLimit(jobs, concurrency, (job) => job());
  return {
    checksums,
    mismatched,
    bytesRead: layout.dataLength + straddling.reduce((sum, p) => sum + p.length, 0),
  };
}
