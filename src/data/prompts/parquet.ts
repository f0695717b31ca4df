/**
 * Reads prompts from a Parquet file (the format datasets are published in), one row group at a
 * time, so that a dataset never sits in memory whole; rows come out numbered from 1 like the
 * lines of a JSONL file, for the loader's report.
 *
 * A row becomes a prompt in one of two ways:
 * - the file has a `payload` column: `{ id, payload, n }` from the columns of those names (a
 *   file written from the JSONL form);
 * - it has none: the payload is the row's other columns as an object (`{"question": ..,
 *   "answer": ..}`), which is what a published dataset looks like.
 * Either way the id comes from `idColumn` (default `id`) and `n`, when there is a column of that
 * name, from `n`. Parquet values become JSON: 64-bit integers become numbers (or, for the id,
 * decimal strings, so that two large ids never collide), dates ISO strings, bytes arrays.
 */
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, parquetSchema, toJson, type FileMetaData } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import { ErrorCodes } from '../../common/error-codes.js';
import { DataInputError } from '../errors.js';
import type { JsonlItem } from './jsonl.js';

export interface ParquetPromptOptions {
  /** Column of the prompt ids. Default `id`. */
  idColumn?: string;
  /** Called after each row group with the rows read so far and the file's row count. */
  onProgress?: (rowsRead: number, rowsTotal: number) => void;
}

/** The rows of a Parquet prompt file; the file's layout is checked before the first row. */
export async function readParquetPrompts(path: string, options: ParquetPromptOptions = {}): Promise<AsyncGenerator<JsonlItem>> {
  const idColumn = options.idColumn ?? 'id';
  let metadata: FileMetaData;
  const file = await asyncBufferFromFile(path);
  try {
    metadata = await parquetMetadataAsync(file);
  } catch (err) {
    throw new DataInputError(ErrorCodes.PROMPT_FILE, `${path} is not a Parquet file: ${(err as Error).message}`);
  }
  const columns = parquetSchema(metadata).children.map((c) => c.element.name);
  if (!columns.includes(idColumn)) {
    throw new DataInputError(
      ErrorCodes.PROMPT_FILE,
      `${path} has no column ${JSON.stringify(idColumn)} for the prompt ids (its columns: ${columns.join(', ')}); name it with --id-column`,
    );
  }
  const hasPayload = columns.includes('payload');
  const total = Number(metadata.num_rows);
  return (async function* rows(): AsyncGenerator<JsonlItem> {
    let rowStart = 0;
    for (const group of metadata.row_groups) {
      const rowEnd = rowStart + Number(group.num_rows);
      let rows: Array<Record<string, unknown>>;
      try {
        rows = await parquetReadObjects({ file, metadata, rowStart, rowEnd, compressors });
      } catch (err) {
        throw new DataInputError(ErrorCodes.PROMPT_FILE, `${path}: rows ${rowStart + 1}-${rowEnd} cannot be read: ${(err as Error).message}`);
      }
      for (const [i, row] of rows.entries()) yield { line: rowStart + i + 1, value: promptOfRow(row, idColumn, hasPayload) };
      rowStart = rowEnd;
      options.onProgress?.(rowStart, total);
    }
  })();
}

function promptOfRow(row: Record<string, unknown>, idColumn: string, hasPayload: boolean): unknown {
  const { [idColumn]: rawId, ...rest } = row;
  const id = typeof rawId === 'bigint' ? String(rawId) : rawId;
  const { n, ...fields } = rest;
  const prompt: Record<string, unknown> = { id, payload: toJson(hasPayload ? fields.payload : fields) };
  // A null n (a nullable column) means "the pool's default", as a missing n does in JSONL.
  if (n !== undefined && n !== null) prompt.n = toJson(n);
  return prompt;
}
