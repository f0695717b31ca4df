/** `laminar prompts load <file>`: a JSONL or Parquet dataset into the prompt pool. */
import { statSync } from 'node:fs';
import { extname } from 'node:path';
import { Command, Option } from 'commander';
import { ErrorCodes } from '../../common/error-codes.js';
import { InvalidInputError } from '../../common/errors.js';
import { DataInputError } from '../../data/errors.js';
import { readJsonl } from '../../data/prompts/jsonl.js';
import { readParquetPrompts } from '../../data/prompts/parquet.js';
import { PromptPool, type LoadItem, type LoadReport } from '../../data/prompts/prompt-pool.js';
import { validatePrompt } from '../../data/prompts/prompt.js';
import { checkName } from '../../data/ids.js';
import { loadProgress } from './load-progress.js';
import { addPoolFlags, connectRedis, shownUrl, type PoolFlags } from './redis-flags.js';

type Format = 'jsonl' | 'parquet';

interface LoadFlags extends PoolFlags {
  format?: Format;
  epochs?: string;
  groupSize: string;
  idColumn: string;
  dryRun?: boolean;
  json?: boolean;
  quiet?: boolean;
}

/** Rejected lines printed one by one; the rest are counted (all of them are in --json). */
const SHOWN_REJECTIONS = 20;

export function promptsLoadCommand(): Command {
  return addPoolFlags(new Command('load'))
    .description('load a JSONL or Parquet file of prompts into the prompt pool (prompts already in the pool are skipped, so a load can be run again)')
    .argument('<file>', 'prompts: .jsonl (one {"id", "payload", "n"?} per line) or .parquet (an id column; a payload column, or the other columns)')
    .addOption(new Option('--format <format>', 'file format (default: from the extension)').choices(['jsonl', 'parquet']))
    .addOption(new Option('--epochs <n>', 'passes over the dataset, 0 = unbounded; recorded when the pool is created (default 1)'))
    .addOption(new Option('--group-size <n>', 'samples per prompt (GRPO group size) for prompts without "n"').default('1'))
    .addOption(new Option('--id-column <name>', 'Parquet: the column holding the prompt ids').default('id'))
    .option('--dry-run', 'check the file and report what would load, without Redis')
    .option('--json', 'print the report as JSON (every rejected line)')
    .option('--quiet', 'no progress on stderr')
    .addHelpText(
      'after',
      `
A JSONL line is {"id": "q1", "payload": <anything JSON>, "n": 8}; "n" is optional. A Parquet
row's payload is its "payload" column, or (when there is none) its other columns as an object.
Bad lines are reported with their line number and the rest load; the command then exits 1 with
ERR_BAD_PROMPT. Prompts whose id is already in the pool are counted as duplicates, not errors.

Examples:
  laminar prompts load train.jsonl
  laminar prompts load train.parquet --id-column uid --group-size 8 --epochs 3
  laminar prompts load train.jsonl --redis redis://10.0.0.5:6379 --prompt-pool math
  LAMINAR_REDIS=redis://10.0.0.5:6379 laminar prompts load train.jsonl --dry-run`,
    )
    .action(async (file: string, opts: LoadFlags) => {
      const format = opts.format ?? formatOf(file);
      const groupSize = integer('group-size', opts.groupSize, 1);
      const epochs = opts.epochs === undefined ? undefined : integer('epochs', opts.epochs, 0);
      const size = fileSize(file);
      const progress = loadProgress(`loading ${file}`, format === 'jsonl' ? 'bytes' : 'rows', size, opts.quiet === true || opts.json === true);
      const items = (): Promise<AsyncIterable<LoadItem>> =>
        format === 'jsonl'
          ? Promise.resolve(readJsonl(file, { onProgress: (bytes) => progress.update(bytes, size) }))
          : readParquetPrompts(file, { idColumn: opts.idColumn, onProgress: (rows, total) => progress.update(rows, total) });
      const unit = format === 'jsonl' ? 'line' : 'row';
      let report: LoadReport;
      let where: string;
      try {
        if (opts.dryRun) {
          // Checked even without Redis, so that a wrong name fails the dry run too.
          checkName('prompt pool', opts.promptPool);
          report = await checkOnly(await items(), groupSize, unit);
          where = 'dry run: nothing written';
        } else {
          const redis = await connectRedis(opts.redis);
          try {
            const pool = await PromptPool.open({ redis, name: opts.promptPool, defaultGroupSize: groupSize, ...(epochs !== undefined ? { epochs } : {}) });
            const recorded = (await pool.progress()).epochs;
            if (epochs !== undefined && recorded !== epochs)
              throw new DataInputError(
                ErrorCodes.BAD_DATA_OPTIONS,
                `prompt pool ${opts.promptPool} already records ${recorded === 0 ? 'unbounded epochs' : `${recorded} epoch(s)`}: --epochs applies when a pool is created (laminar prompts reset it first)`,
              );
            report = await pool.loadItems(await items(), unit);
            const now = await pool.progress();
            where = `pool ${opts.promptPool} at ${shownUrl(opts.redis)} holds ${now.total} prompts (epoch ${now.epoch + 1} of ${now.epochs === 0 ? 'unbounded' : now.epochs})`;
          } finally {
            redis.disconnect();
          }
        }
      } finally {
        progress.end();
      }
      printReport(report, where, unit, opts.json === true, opts.dryRun === true);
      const bad = report.rejected.filter((r) => r.code !== ErrorCodes.DUPLICATE_PROMPT);
      if (bad.length > 0)
        throw new DataInputError(
          ErrorCodes.BAD_PROMPT,
          `${bad.length} ${unit}${bad.length === 1 ? '' : 's'} of ${file} rejected (the first: ${bad[0]!.message})`,
        );
    });
}

function formatOf(file: string): Format {
  const ext = extname(file).toLowerCase();
  if (ext === '.jsonl' || ext === '.ndjson' || ext === '.json') return 'jsonl';
  if (ext === '.parquet' || ext === '.pq') return 'parquet';
  throw new InvalidInputError(ErrorCodes.INVALID_ARG, `cannot tell the format of ${file} from its extension: give --format jsonl or --format parquet`);
}

function integer(flag: string, value: string, min: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isSafeInteger(n) || n < min)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--${flag} must be an integer >= ${min}, got ${JSON.stringify(value)}`);
  return n;
}

function fileSize(file: string): number {
  let stat;
  try {
    stat = statSync(file);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new DataInputError(ErrorCodes.PROMPT_FILE, e.code === 'ENOENT' ? `no such file: ${file}` : `cannot read ${file}: ${e.message}`);
  }
  if (!stat.isFile()) throw new DataInputError(ErrorCodes.PROMPT_FILE, `${file} is not a file`);
  return stat.size;
}

/** --dry-run: what load would report, ids repeated within the file as its duplicates. */
async function checkOnly(items: AsyncIterable<LoadItem>, groupSize: number, unit: string): Promise<LoadReport> {
  const report: LoadReport = { loaded: 0, duplicates: 0, rejected: [] };
  const seen = new Set<string>();
  for await (const item of items) {
    if ('error' in item) {
      report.rejected.push({ line: item.line, code: ErrorCodes.BAD_PROMPT, message: `${unit} ${item.line}: ${item.error}` });
      continue;
    }
    try {
      const { prompt } = validatePrompt(item.value, groupSize);
      if (seen.has(prompt.id)) {
        report.duplicates++;
        report.rejected.push({
          line: item.line,
          code: ErrorCodes.DUPLICATE_PROMPT,
          message: `${unit} ${item.line}: prompt id ${JSON.stringify(prompt.id)} appears earlier in the file`,
        });
      } else {
        seen.add(prompt.id);
        report.loaded++;
      }
    } catch (err) {
      report.rejected.push({ line: item.line, code: ErrorCodes.BAD_PROMPT, message: `${unit} ${item.line}: ${(err as Error).message}` });
    }
  }
  return report;
}

function printReport(report: LoadReport, where: string, unit: string, json: boolean, dryRun: boolean): void {
  if (json) {
    process.stdout.write(`${JSON.stringify(report)}\n`);
    return;
  }
  const bad = report.rejected.filter((r) => r.code !== ErrorCodes.DUPLICATE_PROMPT);
  for (const r of bad.slice(0, SHOWN_REJECTIONS)) process.stderr.write(`${r.code}: ${r.message}\n`);
  if (bad.length > SHOWN_REJECTIONS) process.stderr.write(`... and ${bad.length - SHOWN_REJECTIONS} more rejected ${unit}s (--json lists them all)\n`);
  process.stdout.write(
    `${dryRun ? 'would load' : 'loaded'} ${report.loaded} prompt${report.loaded === 1 ? '' : 's'}, ` +
      `${report.duplicates} ${dryRun ? 'repeated in the file' : 'already in the pool'}, ${bad.length} rejected; ${where}\n`,
  );
}
