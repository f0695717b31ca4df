/**
 * What makes a version a LoRA adapter: keys of its segment's safetensors metadata. They travel
 * with the header wherever the version goes (the chain broadcasts headers verbatim, a restart
 * reads them back), so every relay that holds the version knows what it is without a message
 * of its own. Pure, so that clients (the rollout agent, `laminar versions`) read them without
 * the relay's code.
 *
 *   laminar.kind               "lora" (absent: a full version)
 *   laminar.lora.base_model    the model id of the base the adapter applies to
 *   laminar.lora.base_version  the base version it was trained against, when named (decimal)
 *   laminar.lora.config        the text of its adapter_config.json
 */

export const KIND_KEY = 'laminar.kind';
export const LORA_BASE_MODEL_KEY = 'laminar.lora.base_model';
export const LORA_BASE_VERSION_KEY = 'laminar.lora.base_version';
export const LORA_CONFIG_KEY = 'laminar.lora.config';

/** The PEFT layout of an adapter's version directory (what SGLang, vLLM and PEFT load). */
export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';
export const ADAPTER_CONFIG_FILE = 'adapter_config.json';

/** A full copy of the weights, or a LoRA adapter of a base the relay holds. */
export type VersionKind = 'full' | 'lora';

/** The base an adapter applies to: a model id, and the version it was trained against when named. */
export interface LoraBase {
  model: string;
  version: number | null;
}

/** What a publisher gives with an adapter (`begin`'s `lora`). */
export interface LoraRequest {
  baseModel: string;
  /** Keeps this base version leased on every relay while the adapter is held there. */
  baseVersion?: number;
  /** The text of adapter_config.json. */
  config: string;
}

export function versionKind(metadata: Readonly<Record<string, string>>): VersionKind {
  return metadata[KIND_KEY] === 'lora' ? 'lora' : 'full';
}

/** The base of an adapter version; null for a full version. */
export function loraBaseOf(metadata: Readonly<Record<string, string>>): LoraBase | null {
  if (versionKind(metadata) !== 'lora') return null;
  const version = metadata[LORA_BASE_VERSION_KEY];
  return { model: metadata[LORA_BASE_MODEL_KEY] ?? '', version: version === undefined ? null : Number(version) };
}

/** The metadata keys of an adapter version (validated input: see adapter-check.ts). */
export function loraMetadata(request: LoraRequest): Record<string, string> {
  return {
    [KIND_KEY]: 'lora',
    [LORA_BASE_MODEL_KEY]: request.baseModel,
    ...(request.baseVersion !== undefined ? { [LORA_BASE_VERSION_KEY]: String(request.baseVersion) } : {}),
    [LORA_CONFIG_KEY]: request.config,
  };
}

/** Whether a publisher's own metadata claims keys only `lora` may set. */
export function isLoraKey(key: string): boolean {
  return key === KIND_KEY || key.startsWith('laminar.lora.');
}

/**
 * The name an engine gives an adapter version (`loadLoraAdapter`, a request's `lora`): stable
 * for a model and version, and made of characters every engine accepts in a name.
 */
export function loraAdapterName(model: string, version: number): string {
  return `${model.replace(/[^A-Za-z0-9_.-]/g, '_')}-v${version}`;
}
