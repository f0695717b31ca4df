/**
 * config.json of an FP8 version directory: the model's own config (`--engine-files`) with the
 * `quantization_config` that makes SGLang and vLLM load block-quantised FP8 weights (their
 * Fp8Config: `quant_method` fp8, e4m3, dynamic activation scales, 128x128 weight blocks), and
 * `ignored_layers` naming the linear modules left unquantised.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { FP8_BLOCK } from './plan.js';

export function quantizationConfig(ignoredLayers: readonly string[]): Record<string, unknown> {
  return {
    quant_method: 'fp8',
    fmt: 'e4m3',
    activation_scheme: 'dynamic',
    weight_block_size: [FP8_BLOCK, FP8_BLOCK],
    ignored_layers: [...ignoredLayers],
  };
}

/**
 * The FP8 config.json from the text of the bf16 one. Throws ERR_FP8_BAD_CONFIG when that text
 * is not a JSON object (`source` names the file in the message).
 */
export function fp8ConfigJson(bf16Config: string, ignoredLayers: readonly string[], source: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bf16Config);
  } catch (err) {
    throw new InvalidInputError(ErrorCodes.FP8_BAD_CONFIG, `${source} does not parse: ${(err as Error).message}`, { path: source });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new InvalidInputError(ErrorCodes.FP8_BAD_CONFIG, `${source} is not a JSON object`, { path: source });
  }
  return `${JSON.stringify({ ...parsed, quantization_config: quantizationConfig(ignoredLayers) }, null, 2)}\n`;
}
