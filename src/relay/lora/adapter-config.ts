/**
 * adapter_config.json of a LoRA adapter version: parsed and checked before anything is
 * allocated, and written into the version directory as given (so that the engine reads exactly
 * what the trainer wrote). Only what the relay and the engines rely on is checked: a LoRA config
 * (PEFT's `peft_type`), its rank, its alpha, its target modules, and no trained biases (the
 * adapter's tensors are lora_A/lora_B pairs only).
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export interface AdapterConfig {
  r: number;
  loraAlpha: number;
  /** Module names (a module path matches when it is one of them or ends with `.<name>`), or a regular expression the whole path must match. */
  targetModules: readonly string[] | RegExp;
}

function refuse(why: string): never {
  throw new InvalidInputError(ErrorCodes.LORA_BAD_CONFIG, `adapter_config.json ${why}`);
}

export function parseAdapterConfig(text: unknown): AdapterConfig {
  if (typeof text !== 'string') refuse('must be given as the text of the file');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    refuse(`does not parse: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) refuse('is not a JSON object');
  const config = parsed as Record<string, unknown>;
  if (config.peft_type !== 'LORA') refuse(`has peft_type ${JSON.stringify(config.peft_type)}, not "LORA"`);
  const r = config.r;
  if (typeof r !== 'number' || !Number.isInteger(r) || r < 1) refuse(`has r ${JSON.stringify(r)}: a positive integer is needed`);
  const alpha = config.lora_alpha;
  if (typeof alpha !== 'number' || !Number.isFinite(alpha)) refuse(`has lora_alpha ${JSON.stringify(alpha)}: a number is needed`);
  if (config.bias !== undefined && config.bias !== 'none')
    refuse(`has bias ${JSON.stringify(config.bias)}: adapters with trained biases are not served ("none" only)`);
  return { r, loraAlpha: alpha, targetModules: targetModules(config.target_modules) };
}

function targetModules(value: unknown): readonly string[] | RegExp {
  if (typeof value === 'string') {
    // PEFT: a string is a regular expression matched against the whole module path.
    try {
      return new RegExp(`^(?:${value})$`);
    } catch (err) {
      refuse(`has target_modules ${JSON.stringify(value)}, which is not a regular expression: ${(err as Error).message}`);
    }
  }
  if (Array.isArray(value) && value.length > 0 && value.every((m) => typeof m === 'string' && m.length > 0)) return value as string[];
  refuse(`has target_modules ${JSON.stringify(value)}: a non-empty list of module names or a regular expression is needed`);
}

/** Whether `module` (a path such as `layers.0.attn.qkv`) is one the config targets (PEFT's rule). */
export function targets(config: AdapterConfig, module: string): boolean {
  const t = config.targetModules;
  if (t instanceof RegExp) return t.test(module);
  return t.some((name) => module === name || module.endsWith(`.${name}`));
}
