/**
 * A version published in parts (a trainer whose tensors live on several hosts): pure functions
 * over the version's layout, shared by the publishers of the parts and the relay that assembles
 * them.
 *
 * Every part knows the whole version's tensor list (the manifest: names, dtypes, shapes, in
 * order), so every part lays out the same safetensors file as one publisher of all the tensors
 * would, and the assembled version is byte-identical to it. A part holds some of the tensors:
 * given as runs of consecutive tensor indices, whose bytes are contiguous in the version. A part
 * sends its bytes in pieces: its runs cut at the version's chunk grid, so that a chunk lying in
 * one part is one piece whose checksum is the chunk's own. The part keeps the pieces packed, in
 * order, in a buffer of its own (`packed`: a piece's offset there).
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { chunkAlignedParts, chunkRange, type TensorSpec, type VersionLayout } from '../../safetensors/header.js';

/** Which part of how many (index from 0). */
export interface PartOf {
  index: number;
  count: number;
}

/** Runs of consecutive tensor indices of the layout: [first, count]. */
export type TensorRun = [first: number, count: number];

/** A range of the version's file one part sends, and where it lies in the part's packed buffer. */
export interface PartPiece {
  offset: number;
  length: number;
  packed: number;
}

/** The most parts one version may have, and runs one part may list (a message's size bounds them). */
export const MAX_PARTS = 1024;
export const MAX_PART_RUNS = 4096;

/** "k/n" (k from 1, as an operator counts hosts) as a PartOf (index from 0). */
export function parsePartOf(text: string): PartOf {
  const match = /^(\d+)\/(\d+)$/.exec(text.trim());
  const k = match ? Number(match[1]) : NaN;
  const n = match ? Number(match[2]) : NaN;
  if (!(n >= 1 && n <= MAX_PARTS && k >= 1 && k <= n)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `a part is k/n with 1 <= k <= n <= ${MAX_PARTS}, got ${JSON.stringify(text)}`);
  }
  return { index: k - 1, count: n };
}

/** Checks a part index and count from an untrusted source. */
export function checkPartOf(part: PartOf): void {
  if (
    !Number.isSafeInteger(part.count) ||
    part.count < 1 ||
    part.count > MAX_PARTS ||
    !Number.isSafeInteger(part.index) ||
    part.index < 0 ||
    part.index >= part.count
  ) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `part ${part.index} of ${part.count} is not a part (0 <= index < count <= ${MAX_PARTS})`);
  }
}

/**
 * The runs of the tensors named in `held` (each a tensor of `layout` with the same dtype and
 * shape), in layout order. Throws on a tensor the layout does not have or has otherwise.
 */
export function tensorRuns(layout: Pick<VersionLayout, 'tensors'>, held: readonly TensorSpec[]): TensorRun[] {
  const indexOf = new Map(layout.tensors.map((t, i) => [t.name, i]));
  const indices: number[] = [];
  const seen = new Set<string>();
  for (const spec of held) {
    const i = indexOf.get(spec.name);
    const entry = i === undefined ? undefined : layout.tensors[i]!;
    if (entry === undefined || i === undefined) {
      throw new InvalidInputError(ErrorCodes.UNKNOWN_TENSOR, `tensor ${JSON.stringify(spec.name)} is not in the version's manifest`, { tensor: spec.name });
    }
    if (entry.dtype !== spec.dtype || entry.shape.length !== spec.shape.length || entry.shape.some((d, j) => d !== spec.shape[j])) {
      throw new InvalidInputError(
        ErrorCodes.BAD_TENSOR,
        `tensor ${JSON.stringify(spec.name)} is ${spec.dtype}[${spec.shape.join(',')}] here, ${entry.dtype}[${entry.shape.join(',')}] in the manifest`,
        { tensor: spec.name },
      );
    }
    if (seen.has(spec.name)) throw new InvalidInputError(ErrorCodes.DUPLICATE_TENSOR, `tensor ${JSON.stringify(spec.name)} given twice`, { tensor: spec.name });
    seen.add(spec.name);
    indices.push(i);
  }
  indices.sort((a, b) => a - b);
  const runs: TensorRun[] = [];
  for (const i of indices) {
    const last = runs[runs.length - 1];
    if (last !== undefined && last[0] + last[1] === i) last[1]++;
    else runs.push([i, 1]);
  }
  return runs;
}

/** Checks runs from an untrusted source against a layout of `tensorCount` tensors: ascending, disjoint, in range, not empty. */
export function checkRuns(runs: readonly TensorRun[], tensorCount: number): void {
  let next = 0;
  if (runs.length === 0) throw new InvalidInputError(ErrorCodes.BAD_REQUEST, 'a part holds no tensor');
  for (const [first, count] of runs) {
    if (!Number.isSafeInteger(first) || !Number.isSafeInteger(count) || count < 1 || first < next || first + count > tensorCount) {
      throw new InvalidInputError(ErrorCodes.BAD_REQUEST, `tensor run [${first}, ${count}] is not ascending, disjoint and within the ${tensorCount} tensors`);
    }
    next = first + count;
  }
}

/** The tensor indices the runs cover. */
export function runIndices(runs: readonly TensorRun[]): number[] {
  return runs.flatMap(([first, count]) => Array.from({ length: count }, (_, i) => first + i));
}

/** The pieces of a part: its runs' bytes cut at the chunk grid, packed in order. */
export function partPieces(layout: Pick<VersionLayout, 'tensors' | 'dataOffset' | 'chunkSize'>, runs: readonly TensorRun[]): PartPiece[] {
  const pieces: PartPiece[] = [];
  let packed = 0;
  for (const [first, count] of runs) {
    const begin = layout.tensors[first]!.offset;
    const lastTensor = layout.tensors[first + count - 1]!;
    const length = lastTensor.offset + lastTensor.byteLength - begin;
    if (length === 0) continue; // empty tensors only: nothing to send
    for (const part of chunkAlignedParts(layout, begin, length)) {
      pieces.push({ offset: part.offset, length: part.length, packed });
      packed += part.length;
    }
  }
  return pieces;
}

/** Bytes a part's packed buffer holds. */
export function packedBytes(pieces: readonly PartPiece[]): number {
  const last = pieces[pieces.length - 1];
  return last === undefined ? 0 : last.packed + last.length;
}

/**
 * Where a tensor of a run lies in the part's packed buffer, and the chunk grid shifted into
 * packed coordinates around it (chunk boundaries of the version fall on the same bytes), for a
 * copy that checksums in pieces.
 */
export function packedPlaces(
  layout: Pick<VersionLayout, 'tensors' | 'dataOffset' | 'chunkSize'>,
  runs: readonly TensorRun[],
): Map<number, { packed: number; grid: { dataOffset: number; chunkSize: number } }> {
  const places = new Map<number, { packed: number; grid: { dataOffset: number; chunkSize: number } }>();
  let packed = 0;
  for (const [first, count] of runs) {
    const begin = layout.tensors[first]!.offset;
    const grid = { dataOffset: packed - (begin - layout.dataOffset), chunkSize: layout.chunkSize };
    for (let i = first; i < first + count; i++) {
      const t = layout.tensors[i]!;
      places.set(i, { packed: packed + (t.offset - begin), grid });
    }
    const lastTensor = layout.tensors[first + count - 1]!;
    packed += lastTensor.offset + lastTensor.byteLength - begin;
  }
  return places;
}

/**
 * The chunk checksums the parts' verified pieces give: a chunk that one piece fills has that
 * piece's checksum; a chunk where parts meet (several pieces) is null, to be read.
 */
export function chunkSumsFromPieces(
  layout: Pick<VersionLayout, 'dataOffset' | 'dataLength' | 'chunkSize' | 'chunkCount'>,
  pieces: Iterable<{ offset: number; length: number; sum: string }>,
): (string | null)[] {
  const sums: (string | null)[] = new Array<string | null>(layout.chunkCount).fill(null);
  for (const piece of pieces) {
    if (piece.length === 0) continue;
    const index = Math.floor((piece.offset - layout.dataOffset) / layout.chunkSize);
    const chunk = chunkRange(layout, index);
    if (chunk.offset === piece.offset && chunk.length === piece.length) sums[index] = piece.sum;
  }
  return sums;
}
