/**
 * Which tensors of a version become FP8, and the layout of the FP8 version (pure, no I/O).
 *
 * The layout is the one SGLang and vLLM load for block-quantised FP8 checkpoints (DeepSeek-V3's):
 * a quantised tensor `x.weight` [rows, cols] becomes `x.weight` F8_E4M3 [rows, cols] followed by
 * `x.weight_scale_inv` F32 [ceil(rows/128), ceil(cols/128)], the multiplier that dequantises
 * each 128x128 block; every other tensor is kept as it is. config.json's `quantization_config`
 * (config.ts) tells the engine so.
 *
 * Quantised: 2-D BF16 or F32 tensors whose name the keep pattern does not match. The default
 * pattern keeps what FP8 engines keep in high precision: embeddings, norms, the LM head, biases
 * and MoE routers (`mlp.gate.weight`, a ReplicatedLinear built without quantisation in vLLM).
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import type { Dtype } from '../../safetensors/dtypes.js';
import type { TensorSpec } from '../../safetensors/header.js';

export const FP8_BLOCK = 128;
export const SCALE_SUFFIX = '_scale_inv';

/** Names kept in their dtype by default (matched anywhere in the tensor name). */
export const DEFAULT_FP8_KEEP = String.raw`embed|(^|\.)(wte|wpe|tok_emb|pos_emb)\.|norm|(^|\.)ln_?[a-z0-9]*\.|lm_head|(^|\.)output\.weight$|bias$|(^|\.)gate\.weight$`;

/** Source dtypes the kernel reads. */
const QUANTISABLE: ReadonlySet<Dtype> = new Set<Dtype>(['BF16', 'F32']);

export interface Fp8TensorPlan {
  /** The tensor as in the source version. */
  source: TensorSpec;
  /** Quantised (an F8_E4M3 tensor and its scales) or copied as it is. */
  quantised: boolean;
}

export interface Fp8Plan {
  tensors: Fp8TensorPlan[];
  /** The FP8 version's tensors, in order: each quantised weight followed by its scales. */
  specs: TensorSpec[];
  /** Modules whose 2-D weights stay unquantised: config.json's `ignored_layers`. */
  ignoredLayers: string[];
}

/** Compiles `--fp8-keep` (a regular expression on tensor names), refusing one that does not compile. */
export function compileKeepPattern(source: string): RegExp {
  try {
    return new RegExp(source);
  } catch (err) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--fp8-keep ${JSON.stringify(source)} is not a regular expression: ${(err as Error).message}`);
  }
}

/** Whether `spec` is quantised under `keep`. */
export function isQuantised(spec: TensorSpec, keep: RegExp): boolean {
  return spec.shape.length === 2 && QUANTISABLE.has(spec.dtype) && !keep.test(spec.name);
}

export function scaleShape(shape: readonly number[]): [number, number] {
  return [Math.ceil(shape[0]! / FP8_BLOCK), Math.ceil(shape[1]! / FP8_BLOCK)];
}

/**
 * The FP8 version of tensors `specs` under `keep`. Throws ERR_FP8_NO_ELIGIBLE_TENSORS when no
 * tensor would be quantised, and ERR_DUPLICATE_TENSOR when a scale's name is taken already.
 */
export function planFp8(specs: readonly TensorSpec[], keep: RegExp): Fp8Plan {
  const tensors = specs.map((source) => ({ source, quantised: isQuantised(source, keep) }));
  if (!tensors.some((t) => t.quantised)) {
    throw new InvalidInputError(
      ErrorCodes.FP8_NO_ELIGIBLE_TENSORS,
      `none of the ${specs.length} tensors would be FP8 (2-D BF16 or F32 tensors not matching /${keep.source}/)`,
      { tensors: specs.length, keep: keep.source },
    );
  }
  const names = new Set(specs.map((s) => s.name));
  const out: TensorSpec[] = [];
  const ignoredLayers: string[] = [];
  for (const { source, quantised } of tensors) {
    if (!quantised) {
      out.push(source);
      if (source.shape.length === 2 && source.name.endsWith('.weight')) ignoredLayers.push(source.name.slice(0, -'.weight'.length));
      continue;
    }
    const scaleName = source.name + SCALE_SUFFIX;
    if (names.has(scaleName)) {
      throw new InvalidInputError(ErrorCodes.DUPLICATE_TENSOR, `tensor ${JSON.stringify(scaleName)} exists already: the version cannot get FP8 scales`, {
        tensor: scaleName,
      });
    }
    out.push({ name: source.name, dtype: 'F8_E4M3', shape: [...source.shape] });
    out.push({ name: scaleName, dtype: 'F32', shape: scaleShape(source.shape) });
  }
  return { tensors, specs: out, ignoredLayers };
}
