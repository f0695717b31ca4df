/**
 * Reading trainer checkpoints: a `.safetensors` file or a directory of shards (with or
 * without `model.safetensors.index.json`). Only headers are parsed here; the bytes are copied
 * by the native layer straight from the files into a segment.
 */
import { open, readdir, readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { InvalidInputError, ErrorCodes } from '../common/errors.js';
import { mapLimit } from '../common/concurrency.js';
import type { Mapping } from '../native/index.js';
import { parseHeader, readHeaderLength, type TensorSpec } from '../safetensors/header.js';

export interface CheckpointShard {
  path: string;
  /** Where the shard's data section starts in its file, and how long it is. */
  dataOffset: number;
  dataLength: number;
  /** Tensors in file order (ascending offsets), contiguous. */
  tensors: TensorSpec[];
  metadata: Record<string, string>;
}

export interface Checkpoint {
  shards: CheckpointShard[];
  totalBytes: number;
}

export async function readShardHeader(path: string): Promise<CheckpointShard> {
  const fh = await open(path, 'r');
  try {
    const { size } = await fh.stat();
    const prefix = Buffer.alloc(8);
    await fh.read(prefix, 0, 8, 0);
    const n = readHeaderLength(prefix, size);
    const json = Buffer.alloc(n);
    const { bytesRead } = await fh.read(json, 0, n, 8);
    if (bytesRead !== n) throw new InvalidInputError(ErrorCodes.BAD_SAFETENSORS, `${path}: truncated header`);
    const parsed = parseHeader(json, size);
    const tensors = [...parsed.layout.tensors].sort((a, b) => a.offset - b.offset).map(({ name, dtype, shape }) => ({ name, dtype, shape }));
    return { path, dataOffset: parsed.layout.dataOffset, dataLength: parsed.layout.dataLength, tensors, metadata: parsed.metadata };
  } catch (err) {
    if (err instanceof InvalidInputError) {
      throw new InvalidInputError(err.code, `${path}: ${err.message}`, err.details);
    }
    throw err;
  } finally {
    await fh.close();
  }
}

/** Lists the shard files of a checkpoint path, in a stable order. */
async function shardPaths(path: string): Promise<string[]> {
  const abs = resolve(path);
  const info = await stat(abs).catch((reason: unknown) => {
    const err = reason as NodeJS.ErrnoException;
    throw new InvalidInputError(ErrorCodes.BAD_SAFETENSORS, `cannot read checkpoint ${abs}: ${err.code ?? err.message}`);
  });
  if (info.isFile()) return [abs];
  if (!info.isDirectory()) throw new InvalidInputError(ErrorCodes.BAD_SAFETENSORS, `${abs} is neither a file nor a directory`);
  const names = await readdir(abs);
  if (names.includes('model.safetensors.index.json')) {
    const index = JSON.parse(await readFile(join(abs, 'model.safetensors.index.json'), 'utf8')) as { weight_map?: Record<string, string> };
    const files = [...new Set(Object.values(index.weight_map ?? {}))];
    if (files.length === 0) throw new InvalidInputError(ErrorCodes.BAD_SAFETENSORS, `${abs}: index has an empty weight_map`);
    return files.sort().map((f) => join(abs, f));
  }
  const shards = names.filter((n) => n.endsWith('.safetensors')).sort();
  if (shards.length === 0) throw new InvalidInputError(ErrorCodes.BAD_SAFETENSORS, `${abs}: no .safetensors files`);
  return shards.map((n) => join(abs, n));
}

export async function readCheckpoint(path: string): Promise<Checkpoint> {
  const shards: CheckpointShard[] = [];
  const seen = new Set<string>();
  let totalBytes = 0;
  for (const file of await shardPaths(path)) {
    const shard = await readShardHeader(file);
    for (const t of shard.tensors) {
      if (seen.has(t.name)) throw new InvalidInputError(ErrorCodes.DUPLICATE_TENSOR, `tensor ${JSON.stringify(t.name)} appears in two shards`);
      seen.add(t.name);
    }
    totalBytes += shard.dataLength;
    shards.push(shard);
  }
  return { shards, totalBytes };
}

/**
 * Reads a checkpoint's tensor bytes into `mapping` at `dataOffset`. Shards are laid out back to
 * back in file order, so each is one contiguous copy; big shards are split so that progress moves
 * and several threads read at once.
 */
export async function copyCheckpoint(
  checkpoint: Checkpoint,
  mapping: Mapping,
  dataOffset: number,
  options: { concurrency: number; onProgress?: (done: number, total: number) => void },
): Promise<void> {
  const piece = 256 * 1024 * 1024;
  const jobs: { path: string; fileOffset: number; target: number; length: number }[] = [];
  let target = dataOffset;
  for (const shard of checkpoint.shards) {
    for (let done = 0; done < shard.dataLength; done += piece) {
      jobs.push({ path: shard.path, fileOffset: shard.dataOffset + done, target: target + done, length: Math.min(piece, shard.dataLength - done) });
    }
    target += shard.dataLength;
  }
  let copied = 0;
  options.onProgress?.(0, checkpoint.totalBytes);
  await mapLimit(jobs, options.concurrency, async (job) => {
    await mapping.readFile(job.path, job.fileOffset, job.target, job.length);
    copied += job.length;
    options.onProgress?.(copied, checkpoint.totalBytes);
  });
}
