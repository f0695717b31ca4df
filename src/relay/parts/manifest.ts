/**
 * A part's inputs read from files, for `laminar publish --to ... --part k/n --manifest FILE`:
 * the manifest (the whole version's tensor list, the same file on every host) and this host's
 * tensors from a checkpoint (a .safetensors file or a directory of shards).
 */
import { readFile } from 'node:fs/promises';
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { tensorByteLength, validateTensorSpecs, type TensorSpec } from '../../safetensors/header.js';
import { readCheckpoint } from '../checkpoint.js';

export interface Manifest {
  tensors: TensorSpec[];
  metadata: Record<string, string>;
}

/**
 * Reads a manifest: JSON, either an array of {name, dtype, shape} (the version's tensors in
 * order) or {tensors: [...], metadata?: {key: value}}.
 */
export async function readManifest(path: string): Promise<Manifest> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `cannot read the manifest ${path}: ${(err as Error).message}`);
  }
  const object = Array.isArray(raw) ? { tensors: raw } : (raw as { tensors?: unknown; metadata?: unknown } | null);
  const metadata: unknown = object?.metadata ?? {};
  if (typeof metadata !== 'object' || metadata === null || Object.values(metadata).some((v) => typeof v !== 'string')) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `the manifest ${path}: metadata must map strings to strings`);
  }
  return { tensors: validateTensorSpecs(object?.tensors), metadata: metadata as Record<string, string> };
}

/** This host's tensors, read from a checkpoint into memory. */
export async function readPartTensors(path: string): Promise<(TensorSpec & { data: Uint8Array })[]> {
  const checkpoint = await readCheckpoint(path);
  const tensors: (TensorSpec & { data: Uint8Array })[] = [];
  for (const shard of checkpoint.shards) {
    const bytes = await readFile(shard.path);
    let at = shard.dataOffset;
    for (const spec of shard.tensors) {
      const length = tensorByteLength(spec);
      tensors.push({ ...spec, data: bytes.subarray(at, at + length) });
      at += length;
    }
  }
  return tensors;
}
