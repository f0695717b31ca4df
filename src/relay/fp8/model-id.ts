/**
 * The model id of a version's FP8 variant: `<model>@fp8`. A relay holds the FP8 variant of
 * version N of `org/policy` as version N of `org/policy@fp8` (segment, version directory
 * `<shm-dir>/models/org~2fpolicy~40fp8/v<N>/`, leases and retention of their own), and an
 * acquire of `org/policy@fp8` is answered with it, made from the bf16 version on first request
 * (variants.ts). Pure, so that clients can name the variant without the relay's code.
 */
export const FP8_SUFFIX = '@fp8';

/** The weights an engine loads: the version as published, or its FP8 variant. */
export type WeightsVariant = 'bf16' | 'fp8';

export function fp8ModelId(model: string): string {
  return model + FP8_SUFFIX;
}

/** The model an FP8 variant's id is made from, or null for an id that names no variant. */
export function modelOfFp8(model: string): string | null {
  return model.endsWith(FP8_SUFFIX) && model.length > FP8_SUFFIX.length ? model.slice(0, -FP8_SUFFIX.length) : null;
}

/** The model id to acquire for `variant` of `model`. */
export function variantModelId(model: string, variant: WeightsVariant): string {
  return variant === 'fp8' ? fp8ModelId(model) : model;
}
