/**
 * Offline conversion of a checkpoint (a .safetensors file or a directory of shards, bf16 or
 * f32) into an FP8 model directory: `model.safetensors` in the block-quantised layout (plan.ts)
 * and, when the checkpoint's directory has one, `config.json` with `quantization_config`.
 * `laminar fp8-convert` runs it; the relay's FP8 versions use the same plan and kernel.
 *
 * Nothing is left half made: every check (tensors, config.json) runs before a byte is written,
 * and the weights are written under a temporary name and renamed into place.
 */
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { createSegmentAsync, Mapping } from '../../native/index.js';
import { planLayout, tensorByteLength, type TensorEntry, type VersionLayout } from '../../safetensors/header.js';
import { readCheckpoint } from '../checkpoint.js';
import { fp8ConfigJson } from './config.js';
import { planFp8 } from './plan.js';
import { quantiseVersion, type SourceOf } from './quantize.js';

export interface ConvertOptions {
  keep: RegExp;
  /** Jobs on the libuv pool at once. */
  concurrency: number;
}

export interface ConvertResult {
  /** Tensors of the checkpoint, and how many of them became FP8. */
  tensors: number;
  quantised: number;
  sourceBytes: number;
  bytes: number;
  seconds: number;
  config: boolean;
}

/** A plain safetensors header (no laminar keys) for `layout`, padded to its data offset. */
function plainHeader(layout: VersionLayout): Buffer {
  const header = Object.create(null) as Record<string, unknown>;
  for (const t of layout.tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [t.offset - layout.dataOffset, t.offset - layout.dataOffset + t.byteLength] };
  }
  header.__metadata__ = { format: 'pt' };
  const out = Buffer.alloc(layout.dataOffset, 0x20);
  out.writeBigUInt64LE(BigInt(layout.dataOffset - 8), 0);
  out.write(JSON.stringify(header), 8, 'utf8');
  return out;
}

export async function convertCheckpointToFp8(input: string, outDir: string, options: ConvertOptions): Promise<ConvertResult> {
  const started = performance.now();
  const checkpoint = await readCheckpoint(input);
  const plan = planFp8(
    checkpoint.shards.flatMap((s) => s.tensors),
    options.keep,
  );
  const inputDir = (await stat(input)).isDirectory() ? resolve(input) : dirname(resolve(input));
  const configPath = join(inputDir, 'config.json');
  const configText = await readFile(configPath, 'utf8').catch(() => null);
  const config = configText === null ? null : fp8ConfigJson(configText, plan.ignoredLayers, configPath);

  const layout = planLayout(plan.specs, { model: 'fp8', version: 0, chunkSize: 2 ** 31 });
  const sources = new Map<string, { mapping: Mapping; entry: TensorEntry }>();
  const mappings: Mapping[] = [];
  await mkdir(outDir, { recursive: true });
  const weightsPath = join(outDir, 'model.safetensors');
  const scratch = `${weightsPath}.${process.pid}.partial`;
  try {
    for (const shard of checkpoint.shards) {
      const mapping = new Mapping(shard.path, { writable: false });
      mappings.push(mapping);
      let offset = shard.dataOffset;
      for (const spec of shard.tensors) {
        const byteLength = tensorByteLength(spec);
        sources.set(spec.name, { mapping, entry: { ...spec, offset, byteLength } });
        offset += byteLength;
      }
    }
    await createSegmentAsync(scratch, layout.totalSize, 0o644);
    const target = new Mapping(scratch, { writable: true });
    mappings.push(target);
    new Uint8Array(target.view(0, layout.dataOffset)).set(plainHeader(layout));
    const sourceOf: SourceOf = (name) => sources.get(name)!;
    await quantiseVersion(plan, sourceOf, target, layout, options.concurrency);
    target.close();
    await rename(scratch, weightsPath);
    if (config !== null) await writeAtomically(join(outDir, 'config.json'), config);
  } finally {
    for (const m of mappings) m.close();
    await rm(scratch, { force: true });
  }
  return {
    tensors: plan.tensors.length,
    quantised: plan.tensors.filter((t) => t.quantised).length,
    sourceBytes: checkpoint.totalBytes,
    bytes: layout.totalSize,
    seconds: (performance.now() - started) / 1e3,
    config: config !== null,
  };
}

async function writeAtomically(path: string, text: string): Promise<void> {
  await writeFile(`${path}.partial`, text);
  await rename(`${path}.partial`, path);
}
