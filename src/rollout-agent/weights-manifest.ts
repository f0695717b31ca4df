/**
 * What a version directory holds, for engines that load whatever they are given. SGLang 0.5.23's
 * `/update_weights_from_disk` answers `success` for a directory that lacks a tensor or holds one
 * of another shape, and then serves a mixture of two versions (docs/reference/engine-http.md).
 * The client checks a version's tensor names and shapes against the version in service before
 * asking the engine to load it, as laminar's vLLM worker extension does inside vLLM. Dtypes are
 * not compared: SGLang casts a tensor to the served dtype and loads it whole.
 */
import { readCheckpoint } from '../relay/checkpoint.js';

/** Tensor name → shape, from the safetensors headers of a directory (shards included). */
export type TensorShapes = ReadonlyMap<string, readonly number[]>;

export async function tensorShapes(dir: string): Promise<TensorShapes> {
  const checkpoint = await readCheckpoint(dir);
  return new Map(checkpoint.shards.flatMap((shard) => shard.tensors.map((t) => [t.name, t.shape] as const)));
}

/** Why `next` cannot replace `served` in an engine (tensors missing or of another shape), or null. */
export function shapesMismatch(served: TensorShapes, next: TensorShapes): string | null {
  const missing = [...served.keys()].filter((name) => !next.has(name));
  const reshaped = [...served].filter(([name, shape]) => next.has(name) && !sameShape(shape, next.get(name)!));
  if (missing.length === 0 && reshaped.length === 0) return null;
  const parts: string[] = [];
  if (missing.length > 0) parts.push(`${missing.length} tensor(s) missing (${listed(missing)})`);
  if (reshaped.length > 0) {
    parts.push(
      `${reshaped.length} of another shape (${listed(reshaped.map(([name, shape]) => `${name} [${next.get(name)!.join(', ')}] for [${shape.join(', ')}]`))})`,
    );
  }
  return parts.join('; ');
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((n, i) => n === b[i]);
}

function listed(items: string[]): string {
  return items.length <= 3 ? items.join(', ') : `${items.slice(0, 3).join(', ')}, ...`;
}
