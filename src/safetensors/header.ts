/**
 * The safetensors layout of a laminar version, as pure functions over bytes (no I/O).
 *
 *   [u64 little-endian N][N bytes of JSON header, space-padded][tensor data, contiguous]
 *
 * The header maps each tensor name to {dtype, shape, data_offsets: [begin, end)} (offsets into
 * the data section) and carries `__metadata__` (string -> string). laminar writes its own keys
 * there: model id, version, chunk size, checksum algorithm and one checksum per chunk of the
 * data section. The header is padded so that the data starts on a page boundary: tensors map
 * page-aligned and the header can be rewritten in place at commit without moving any data.
 */
import { InvalidInputError, ErrorCodes } from '../common/errors.js';
import { DTYPE_SIZES, isDtype, type Dtype } from './dtypes.js';

export interface TensorSpec {
  name: string;
  dtype: Dtype;
  shape: number[];
}

export interface TensorEntry extends TensorSpec {
  /** Byte offset of the tensor in the whole file (not the data section). */
  offset: number;
  byteLength: number;
}

export interface VersionLayout {
  headerLength: number; // N: the JSON length, padding included
  dataOffset: number; // 8 + N
  dataLength: number;
  totalSize: number;
  tensors: TensorEntry[];
  chunkSize: number;
  chunkCount: number;
}

export interface LaminarMetadata {
  model: string;
  version: number;
  chunkSize: number;
  checksums: string[]; // one 16-hex-digit XXH3-64 per chunk
}

export const DATA_ALIGNMENT = 4096;
export const CHECKSUM_ALGORITHM = 'xxh3-64';
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;
export const MAX_TENSORS = 1_000_000;
export const MAX_RANK = 16;
export const MAX_NAME_LENGTH = 1024;
const PLACEHOLDER_CHECKSUM = '0'.repeat(16);

const META = {
  model: 'laminar.model',
  version: 'laminar.version',
  chunkSize: 'laminar.chunk_size',
  algorithm: 'laminar.checksum',
  chunks: 'laminar.chunks',
} as const;

function bad(code: string, message: string, details?: Record<string, unknown>): never {
  throw new InvalidInputError(code, message, details);
}

/** Element count x element size, refusing anything that is not a safe integer. */
export function tensorByteLength(spec: { name: string; dtype: Dtype; shape: readonly number[] }): number {
  let elements = 1;
  for (const dim of spec.shape) {
    if (!Number.isSafeInteger(dim) || dim < 0) {
      bad(ErrorCodes.BAD_SHAPE, `tensor ${JSON.stringify(spec.name)}: dimension ${String(dim)} is not a non-negative integer`, {
        tensor: spec.name,
      });
    }
    elements *= dim;
    if (!Number.isSafeInteger(elements)) {
      bad(ErrorCodes.BAD_SHAPE, `tensor ${JSON.stringify(spec.name)}: shape [${spec.shape.join(', ')}] overflows`, {
        tensor: spec.name,
      });
    }
  }
  const bytes = elements * DTYPE_SIZES[spec.dtype];
  if (!Number.isSafeInteger(bytes)) bad(ErrorCodes.BAD_SHAPE, `tensor ${JSON.stringify(spec.name)} is too large`);
  return bytes;
}

/** Validates a tensor list from an untrusted source: names, dtypes, shapes, duplicates. */
export function validateTensorSpecs(input: unknown): TensorSpec[] {
  if (!Array.isArray(input)) bad(ErrorCodes.BAD_TENSOR, 'tensors must be an array');
  if (input.length > MAX_TENSORS) bad(ErrorCodes.BAD_TENSOR, `too many tensors (${input.length} > ${MAX_TENSORS})`);
  const seen = new Set<string>();
  const specs: TensorSpec[] = [];
  input.forEach((raw: unknown, index) => {
    if (typeof raw !== 'object' || raw === null) bad(ErrorCodes.BAD_TENSOR, `tensor #${index} is not an object`);
    const { name, dtype, shape } = raw as Record<string, unknown>;
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME_LENGTH || name === '__metadata__') {
      bad(ErrorCodes.BAD_TENSOR, `tensor #${index}: name must be a non-empty string of at most ${MAX_NAME_LENGTH} characters, not __metadata__`);
    }
    if (seen.has(name)) bad(ErrorCodes.DUPLICATE_TENSOR, `duplicate tensor name ${JSON.stringify(name)}`, { tensor: name });
    seen.add(name);
    if (!isDtype(dtype)) {
      bad(ErrorCodes.BAD_DTYPE, `tensor ${JSON.stringify(name)}: unknown dtype ${JSON.stringify(dtype)}`, { tensor: name });
    }
    if (!Array.isArray(shape) || shape.length > MAX_RANK) {
      bad(ErrorCodes.BAD_SHAPE, `tensor ${JSON.stringify(name)}: shape must be an array of at most ${MAX_RANK} dimensions`, {
        tensor: name,
      });
    }
    const spec: TensorSpec = { name, dtype, shape: shape as number[] };
    tensorByteLength(spec);
    specs.push({ name, dtype, shape: [...(shape as number[])] });
  });
  return specs;
}

function checkChunkSize(chunkSize: number): void {
  if (!Number.isSafeInteger(chunkSize) || chunkSize < 4096 || chunkSize > 2 ** 31) {
    bad(ErrorCodes.INVALID_ARG, `chunk size must be an integer between 4096 and 2^31 bytes, got ${chunkSize}`);
  }
}

export function chunkCountFor(dataLength: number, chunkSize: number): number {
  return Math.ceil(dataLength / chunkSize);
}

/** The byte range [offset, offset+length) of chunk `index`, in file coordinates. */
export function chunkRange(
  layout: Pick<VersionLayout, 'dataOffset' | 'dataLength' | 'chunkSize'>,
  index: number,
): {
  offset: number;
  length: number;
} {
  const begin = index * layout.chunkSize;
  return { offset: layout.dataOffset + begin, length: Math.min(layout.chunkSize, layout.dataLength - begin) };
}

/**
 * [offset, offset+length) cut where it crosses a chunk boundary: its parts in consecutive chunks,
 * in order. A writer that checksums its tensors in these parts lets commit check them in the same
 * read that computes the chunk checksums. An empty range is one empty part.
 */
export function chunkAlignedParts(grid: Pick<VersionLayout, 'dataOffset' | 'chunkSize'>, offset: number, length: number): { offset: number; length: number }[] {
  const parts: { offset: number; length: number }[] = [];
  const end = offset + length;
  let at = offset;
  do {
    const chunkEnd = grid.dataOffset + (Math.floor((at - grid.dataOffset) / grid.chunkSize) + 1) * grid.chunkSize;
    const partEnd = Math.min(end, chunkEnd);
    parts.push({ offset: at, length: partEnd - at });
    at = partEnd;
  } while (at < end);
  return parts;
}

function headerObject(tensors: readonly TensorEntry[], dataOffset: number, meta: Record<string, string>): Record<string, unknown> {
  // No prototype: a tensor may legitimately be named "__proto__" or "constructor".
  const header = Object.create(null) as Record<string, unknown>;
  for (const t of tensors) {
    header[t.name] = {
      dtype: t.dtype,
      shape: t.shape,
      data_offsets: [t.offset - dataOffset, t.offset - dataOffset + t.byteLength],
    };
  }
  header.__metadata__ = meta;
  return header;
}

function laminarMeta(meta: LaminarMetadata, extra: Record<string, string>): Record<string, string> {
  return Object.assign(Object.create(null) as Record<string, string>, extra, {
    [META.model]: meta.model,
    [META.version]: String(meta.version),
    [META.chunkSize]: String(meta.chunkSize),
    [META.algorithm]: CHECKSUM_ALGORITHM,
    [META.chunks]: meta.checksums.join(','),
  });
}

/** How a version is cut into chunks: the chunk size, and header room reserved (see planLayout). */
export interface ChunkLayout {
  chunkSize: number;
  headerChunks?: number;
}

/**
 * Lays out a version: tensors contiguous in the given order, data page-aligned, header space
 * sized for the final checksums so that commit rewrites it in place.
 *
 * `headerChunks` reserves header room for that many checksums (and a chunk size of any length)
 * when the version may have fewer: a relay that chooses each version's chunk size reserves for
 * the most chunks it could choose, so that the version's size, and where its data starts, do
 * not depend on the choice (a spare segment or a staging buffer sized by the last version fits
 * the next one). The unused room is the header's space padding.
 */
export function planLayout(
  specs: readonly TensorSpec[],
  options: { model: string; version: number; extraMetadata?: Record<string, string> } & ChunkLayout,
): VersionLayout {
  checkChunkSize(options.chunkSize);
  let dataLength = 0;
  const relative: { spec: TensorSpec; begin: number; byteLength: number }[] = [];
  for (const spec of specs) {
    const byteLength = tensorByteLength(spec);
    relative.push({ spec, begin: dataLength, byteLength });
    dataLength += byteLength;
    if (!Number.isSafeInteger(dataLength)) bad(ErrorCodes.BAD_SHAPE, 'the tensors add up to more bytes than can be addressed');
  }
  const chunkCount = chunkCountFor(dataLength, options.chunkSize);
  const reserved = Math.max(chunkCount, options.headerChunks ?? 0);
  const placeholder = new Array<string>(reserved).fill(PLACEHOLDER_CHECKSUM);
  // With a reserve, room for the longest chunk size too (2^31, the largest accepted).
  const sizedChunk = options.headerChunks === undefined ? options.chunkSize : 2 ** 31;
  const draftTensors = relative.map(({ spec, begin, byteLength }) => ({ ...spec, offset: begin, byteLength }));
  const json = JSON.stringify(
    headerObject(
      draftTensors,
      0,
      laminarMeta({ model: options.model, version: options.version, chunkSize: sizedChunk, checksums: placeholder }, options.extraMetadata ?? {}),
    ),
  );
  const jsonBytes = Buffer.byteLength(json);
  if (jsonBytes > MAX_HEADER_BYTES) bad(ErrorCodes.BAD_TENSOR, `the header would be ${jsonBytes} bytes (limit ${MAX_HEADER_BYTES})`);
  const dataOffset = Math.ceil((8 + jsonBytes) / DATA_ALIGNMENT) * DATA_ALIGNMENT;
  return {
    headerLength: dataOffset - 8,
    dataOffset,
    dataLength,
    totalSize: dataOffset + dataLength,
    tensors: relative.map(({ spec, begin, byteLength }) => ({ ...spec, offset: dataOffset + begin, byteLength })),
    chunkSize: options.chunkSize,
    chunkCount,
  };
}

/**
 * Encodes the 8-byte length prefix and the padded JSON header for a layout and its checksums.
 * The result is exactly `layout.dataOffset` bytes long.
 */
export function encodeHeader(layout: VersionLayout, meta: LaminarMetadata, extraMetadata: Record<string, string> = {}): Buffer {
  if (meta.checksums.length !== layout.chunkCount) {
    bad(ErrorCodes.INVALID_ARG, `expected ${layout.chunkCount} chunk checksums, got ${meta.checksums.length}`);
  }
  const json = JSON.stringify(headerObject(layout.tensors, layout.dataOffset, laminarMeta(meta, extraMetadata)));
  const jsonBytes = Buffer.byteLength(json);
  if (jsonBytes > layout.headerLength) {
    bad(ErrorCodes.INTERNAL, `header grew past its reserved space (${jsonBytes} > ${layout.headerLength})`);
  }
  const out = Buffer.alloc(layout.dataOffset, 0x20);
  out.writeBigUInt64LE(BigInt(layout.headerLength), 0);
  out.write(json, 8, 'utf8');
  return out;
}

export interface ParsedHeader {
  layout: VersionLayout;
  /** laminar's keys, when the file is a laminar version; null for a foreign checkpoint. */
  laminar: LaminarMetadata | null;
  /** Every other `__metadata__` entry, preserved. */
  metadata: Record<string, string>;
}

/** Reads N from the first 8 bytes, refusing sizes that cannot be a header. */
export function readHeaderLength(prefix: Uint8Array, fileSize: number): number {
  if (prefix.byteLength < 8) bad(ErrorCodes.BAD_SAFETENSORS, 'file is shorter than the 8-byte header length');
  const n = Buffer.from(prefix.buffer, prefix.byteOffset, 8).readBigUInt64LE(0);
  if (n < 2n || n > BigInt(Math.min(MAX_HEADER_BYTES, fileSize - 8))) {
    bad(ErrorCodes.BAD_SAFETENSORS, `header length ${n} is impossible for a file of ${fileSize} bytes`);
  }
  return Number(n);
}

/**
 * Parses and validates a safetensors header (JSON bytes without the length prefix), for a file
 * of `fileSize` bytes. Checks every entry, and that the tensors tile the data section exactly
 * (no holes, no overlaps, nothing past the end), as the format requires.
 */
export function parseHeader(json: Uint8Array, fileSize: number, chunkSizeDefault = 32 * 1024 * 1024): ParsedHeader {
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(json.buffer, json.byteOffset, json.byteLength).toString('utf8'));
  } catch (err) {
    bad(ErrorCodes.BAD_SAFETENSORS, `header is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) bad(ErrorCodes.BAD_SAFETENSORS, 'header is not a JSON object');
  const headerLength = json.byteLength;
  const dataOffset = 8 + headerLength;
  const dataLength = fileSize - dataOffset;
  if (dataLength < 0) bad(ErrorCodes.BAD_SAFETENSORS, 'file is shorter than its header');
  const metadata = Object.create(null) as Record<string, string>;
  const tensors: TensorEntry[] = [];
  for (const [name, value] of Object.entries(raw as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof value !== 'object' || value === null) bad(ErrorCodes.BAD_SAFETENSORS, '__metadata__ is not an object');
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        if (typeof v !== 'string') bad(ErrorCodes.BAD_SAFETENSORS, `__metadata__.${k} is not a string`);
        metadata[k] = v;
      }
      continue;
    }
    const entry = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown } | null;
    if (typeof entry !== 'object' || entry === null) bad(ErrorCodes.BAD_SAFETENSORS, `tensor ${JSON.stringify(name)} is not an object`);
    const [spec] = validateTensorSpecs([{ name, dtype: entry.dtype, shape: entry.shape }]) as [TensorSpec];
    const offsets = entry.data_offsets;
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
      bad(ErrorCodes.BAD_SAFETENSORS, `tensor ${JSON.stringify(name)}: data_offsets must be two non-negative integers`);
    }
    const [begin, end] = offsets as [number, number];
    const byteLength = tensorByteLength(spec);
    if (end - begin !== byteLength) {
      bad(ErrorCodes.BAD_SAFETENSORS, `tensor ${JSON.stringify(name)}: data_offsets span ${end - begin} bytes but dtype and shape need ${byteLength}`);
    }
    tensors.push({ ...spec, offset: dataOffset + begin, byteLength });
  }
  const sorted = [...tensors].sort((a, b) => a.offset - b.offset || a.byteLength - b.byteLength);
  let cursor = dataOffset;
  for (const t of sorted) {
    if (t.offset !== cursor) {
      bad(ErrorCodes.BAD_SAFETENSORS, `tensor ${JSON.stringify(t.name)} does not start where the previous one ends (hole or overlap)`);
    }
    cursor += t.byteLength;
  }
  if (cursor !== fileSize) bad(ErrorCodes.BAD_SAFETENSORS, `tensors cover ${cursor - dataOffset} bytes but the data section has ${dataLength}`);

  const laminar = readLaminarMetadata(metadata, dataLength);
  // eslint-disable-next-line @typescript-eslint/no-dynamic-delete -- drops the fixed set of laminar.* keys (META) from the null-prototype record of the file's metadata
  for (const key of Object.values(META)) delete metadata[key];
  const chunkSize = laminar?.chunkSize ?? chunkSizeDefault;
  return {
    layout: {
      headerLength,
      dataOffset,
      dataLength,
      totalSize: fileSize,
      tensors: sorted,
      chunkSize,
      chunkCount: chunkCountFor(dataLength, chunkSize),
    },
    laminar,
    metadata,
  };
}

function readLaminarMetadata(meta: Record<string, string>, dataLength: number): LaminarMetadata | null {
  if (meta[META.model] === undefined) return null;
  const version = Number(meta[META.version]);
  const chunkSize = Number(meta[META.chunkSize]);
  if (!Number.isSafeInteger(version) || version < 0) bad(ErrorCodes.BAD_SAFETENSORS, 'laminar.version is not a non-negative integer');
  checkChunkSize(chunkSize);
  if (meta[META.algorithm] !== CHECKSUM_ALGORITHM) bad(ErrorCodes.BAD_SAFETENSORS, `unsupported checksum ${String(meta[META.algorithm])}`);
  const checksums = (meta[META.chunks] ?? '').split(',').filter((c) => c.length > 0);
  if (checksums.length !== chunkCountFor(dataLength, chunkSize) || !checksums.every((c) => /^[0-9a-f]{16}$/.test(c))) {
    bad(ErrorCodes.BAD_SAFETENSORS, 'laminar.chunks does not hold one 16-hex-digit checksum per chunk');
  }
  return { model: meta[META.model] as string, version, chunkSize, checksums };
}
