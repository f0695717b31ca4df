/**
 * The layout of a batch in its arena file, as the Python side reads it:
 *
 *   [0, headerBytes)               per-item numeric columns, one array per field, each aligned
 *                                  to 64 bytes and sized for the service's batch size
 *   [headerBytes, + 4 T)           every item's tokens, packed in item order (int32)
 *   [headerBytes + 4 T, + 8 T)     every item's logprobs, same order and indices (float32)
 *   [maskOffset, + T)              every item's loss mask, same order and indices (uint8: 1 for
 *                                  a generated token, 0 for prompt and observation tokens);
 *                                  maskOffset is after the block's whole payload room
 *
 * T is the batch's token count. The payload part is the sampler's arena (payload-loader.ts
 * writes it in this packed layout); the columns are written here at hand-over, so that the
 * client builds one numpy view per column instead of doing per-item work. Little endian.
 */
import type { Batch } from '../experience/batch.js';
import { fillLossMask } from '../codec/segments.js';
import { LaminarError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';

export type ColumnDtype = 'int32' | 'int64' | 'float64';

export interface ColumnInfo {
  name: string;
  dtype: ColumnDtype;
  /** Byte offset in the arena file; the column holds `count` elements. */
  offset: number;
}

const SIZE: Record<ColumnDtype, number> = { int32: 4, int64: 8, float64: 8 };
const COLUMN_ALIGN = 64;
/** The payload starts on a page boundary (pinning and DMA-friendly for the trainer). */
const PAYLOAD_ALIGN = 4096;

/** The per-item columns, in file order. Python names them the same (snake case). */
export const COLUMNS: ReadonlyArray<{ name: string; dtype: ColumnDtype }> = [
  /** Index of the item's first token in the batch's tokens (and of its first logprob in logprobs). */
  { name: 'token_offsets', dtype: 'int64' },
  { name: 'lengths', dtype: 'int32' },
  { name: 'prompt_lengths', dtype: 'int32' },
  { name: 'response_lengths', dtype: 'int32' },
  { name: 'sample_indices', dtype: 'int32' },
  { name: 'group_sizes', dtype: 'int32' },
  { name: 'times_sampled', dtype: 'int32' },
  { name: 'weight_versions', dtype: 'int64' },
  { name: 'staleness', dtype: 'int64' },
  { name: 'seqs', dtype: 'int64' },
  { name: 'rewards', dtype: 'float64' },
  { name: 'priorities', dtype: 'float64' },
  { name: 'created_at', dtype: 'float64' },
  { name: 'completed_at', dtype: 'float64' },
];

const align = (n: number, to: number): number => Math.ceil(n / to) * to;

/** Where each column of a batch of up to `capacity` items goes, and the header's size. */
export function headerLayout(capacity: number): { columns: ColumnInfo[]; headerBytes: number } {
  let at = 0;
  const columns = COLUMNS.map((c) => {
    const info = { name: c.name, dtype: c.dtype, offset: at };
    at = align(at + capacity * SIZE[c.dtype], COLUMN_ALIGN);
    return info;
  });
  return { columns, headerBytes: align(Math.max(at, 1), PAYLOAD_ALIGN) };
}

/** The batch's token count and where tokens and logprobs start in the arena buffer (offset 0). */
export function payloadLayout(batch: Batch): { tokenCount: number } {
  let tokenCount = 0;
  for (const it of batch.items) tokenCount += it.tokens.length;
  // The loader's packed layout is what the descriptor promises: check it rather than trust it.
  let expected = 0;
  for (const it of batch.items) {
    if (it.tokens.byteOffset !== expected * 4 || it.logprobs.byteOffset !== (tokenCount + expected) * 4) {
      throw new LaminarError(ErrorCodes.INTERNAL, `batch item ${it.id} is not at its place in the packed layout`);
    }
    expected += it.tokens.length;
  }
  return { tokenCount };
}

/** Writes the per-item columns of `batch` into `header` (the arena file's first headerBytes). */
export function writeColumns(header: ArrayBuffer, columns: readonly ColumnInfo[], batch: Batch): void {
  const n = batch.items.length;
  const items = batch.items;
  for (const c of columns) {
    const value = columnValue(c.name);
    if (c.dtype === 'int64') {
      const a = new BigInt64Array(header, c.offset, n);
      for (let i = 0; i < n; i++) a[i] = BigInt(value(items[i]!));
    } else {
      const a = c.dtype === 'int32' ? new Int32Array(header, c.offset, n) : new Float64Array(header, c.offset, n);
      for (let i = 0; i < n; i++) a[i] = value(items[i]!);
    }
  }
}

type Item = Batch['items'][number];

function columnValue(name: string): (it: Item) => number {
  switch (name) {
    case 'token_offsets':
      return (it) => it.tokens.byteOffset / 4;
    case 'lengths':
      return (it) => it.tokens.length;
    case 'prompt_lengths':
      return (it) => it.promptLength;
    case 'response_lengths':
      return (it) => it.responseLength;
    case 'sample_indices':
      return (it) => it.sampleIndex;
    case 'group_sizes':
      return (it) => it.groupSize;
    case 'times_sampled':
      return (it) => it.timesSampled;
    case 'weight_versions':
      return (it) => it.weightVersion;
    case 'staleness':
      return (it) => it.staleness;
    case 'seqs':
      return (it) => it.seq;
    case 'rewards':
      return (it) => it.reward;
    case 'priorities':
      return (it) => it.priority ?? 1;
    case 'created_at':
      return (it) => it.createdAt;
    case 'completed_at':
      return (it) => it.completedAt;
    default:
      throw new LaminarError(ErrorCodes.INTERNAL, `no value for column ${name}`);
  }
}

/**
 * Writes every item's loss mask into `mask` at its tokens' indices: one fill per segment from
 * the segments the index already holds (a record's header), never a pass over the tokens.
 */
export function writeLossMask(mask: Uint8Array, batch: Batch): void {
  for (const it of batch.items) fillLossMask(mask, it.tokens.byteOffset / 4, it);
}
