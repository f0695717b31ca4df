/**
 * The tensors of a LoRA adapter version, in PEFT's layout: for each adapted module of the base,
 * `base_model.model.<module>.lora_A.weight` [r, in] and `base_model.model.<module>.lora_B.weight`
 * [out, r] (what `get_peft_model_state_dict` gives and adapter_model.safetensors holds). Checked
 * before anything is allocated: every tensor one of a pair, both halves there, 2-D, floating
 * point, of the config's rank, and on a module the config targets.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import type { TensorSpec } from '../../safetensors/header.js';
import { targets, type AdapterConfig } from './adapter-config.js';

/** One adapted module: its path in the base model and the shape of the base weight it changes. */
export interface AdaptedModule {
  module: string;
  /** Rows (out) and columns (in) of the base's `<module>.weight`. */
  out: number;
  in: number;
}

const LORA_TENSOR = /^base_model\.model\.(.+)\.lora_(A|B)\.weight$/;
const FLOAT_DTYPES: ReadonlySet<string> = new Set(['F32', 'F16', 'BF16']);

function refuse(tensor: string, why: string): never {
  throw new InvalidInputError(ErrorCodes.LORA_BAD_TENSORS, `adapter tensor ${JSON.stringify(tensor)} ${why}`, { tensor });
}

/** The modules an adapter's tensors adapt; throws ERR_LORA_BAD_TENSORS. */
export function adaptedModules(specs: readonly TensorSpec[], config: AdapterConfig): AdaptedModule[] {
  const pairs = new Map<string, { A?: TensorSpec; B?: TensorSpec }>();
  for (const spec of specs) {
    const match = LORA_TENSOR.exec(spec.name);
    if (!match) refuse(spec.name, 'is not base_model.model.<module>.lora_A.weight or .lora_B.weight (keys as get_peft_model_state_dict gives them)');
    if (spec.shape.length !== 2) refuse(spec.name, `has shape [${spec.shape.join(', ')}]: a LoRA matrix is 2-D`);
    if (!FLOAT_DTYPES.has(spec.dtype)) refuse(spec.name, `is ${spec.dtype}: F32, F16 or BF16 is needed`);
    const [, module, half] = match as unknown as [string, string, 'A' | 'B'];
    const pair = pairs.get(module) ?? {};
    pair[half] = spec;
    pairs.set(module, pair);
  }
  if (pairs.size === 0) throw new InvalidInputError(ErrorCodes.LORA_BAD_TENSORS, 'a LoRA adapter version has no tensors');
  const modules: AdaptedModule[] = [];
  for (const [module, { A, B }] of pairs) {
    if (!A) refuse(B!.name, `has no lora_A beside it (base_model.model.${module}.lora_A.weight)`);
    if (!B) refuse(A.name, `has no lora_B beside it (base_model.model.${module}.lora_B.weight)`);
    if (A.shape[0] !== config.r) refuse(A.name, `has shape [${A.shape.join(', ')}]: lora_A is [r, in] with the config's r = ${config.r}`);
    if (B.shape[1] !== config.r) refuse(B.name, `has shape [${B.shape.join(', ')}]: lora_B is [out, r] with the config's r = ${config.r}`);
    if (!targets(config, module)) refuse(A.name, `adapts ${module}, which the config's target_modules does not name`);
    modules.push({ module, out: B.shape[0]!, in: A.shape[1]! });
  }
  return modules;
}
