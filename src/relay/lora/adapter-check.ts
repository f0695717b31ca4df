/**
 * The checks a LoRA adapter version passes at `begin`, before its segment is allocated: its
 * adapter_config.json (adapter-config.ts), its tensors (adapter-tensors.ts), and its base. The
 * base must be a full version this relay holds complete (the version named, or else the newest
 * full one of the base model), and every adapted module must have a weight there whose shape
 * the pair fits ([out, in] for lora_B·lora_A): an adapter trained on another model is refused
 * with ERR_LORA_BASE_MISMATCH, never served to an engine that would fail or, worse, load it.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import type { TensorSpec } from '../../safetensors/header.js';
import type { StoredVersion } from '../store/stored-version.js';
import { parseAdapterConfig } from './adapter-config.js';
import { adaptedModules } from './adapter-tensors.js';
import { LORA_CONFIG_KEY, loraBaseOf, loraMetadata, versionKind, type LoraRequest } from './metadata.js';

/** `begin`'s `lora` as it arrives: the config is checked here (ERR_LORA_BAD_CONFIG when it is not a config's text). */
export type LoraBeginRequest = Omit<LoraRequest, 'config'> & { config: unknown };

/** Finds a base: the complete version named, or the newest complete full version of the model. */
export type BaseLookup = (model: string, version: number | null) => StoredVersion | undefined;

function mismatch(why: string, details: Record<string, unknown>): never {
  throw new InvalidInputError(ErrorCodes.LORA_BASE_MISMATCH, why, details);
}

/**
 * Checks an adapter `model`@`version` of `specs` and returns the metadata that makes it one
 * (metadata.ts). Throws ERR_LORA_BAD_CONFIG, ERR_LORA_BAD_TENSORS or ERR_LORA_BASE_MISMATCH.
 */
export function checkAdapter(
  adapter: { model: string; version: number; specs: readonly TensorSpec[]; lora: LoraBeginRequest },
  findBase: BaseLookup,
): Record<string, string> {
  const { lora } = adapter;
  const config = parseAdapterConfig(lora.config);
  const modules = adaptedModules(adapter.specs, config);
  const named = lora.baseVersion ?? null;
  if (lora.baseModel === adapter.model && named !== null && named >= adapter.version) {
    mismatch(`version ${adapter.version} of ${adapter.model} cannot be an adapter of its own version ${named}: a base comes before its adapters`, {
      baseModel: lora.baseModel,
      baseVersion: named,
    });
  }
  const base = findBase(lora.baseModel, named);
  const which = named === null ? `no complete full version of ${lora.baseModel}` : `not version ${named} of ${lora.baseModel} complete`;
  if (!base) mismatch(`this relay holds ${which}: an adapter is published where its base is`, { baseModel: lora.baseModel, baseVersion: named });
  if (versionKind(base.metadata) !== 'full') {
    mismatch(`version ${base.version} of ${base.model} is itself a LoRA adapter, not a base`, { baseModel: base.model, baseVersion: base.version });
  }
  for (const { module, out, in: inDim } of modules) {
    const weight = base.tensor(`${module}.weight`);
    if (!weight) mismatch(`the base (version ${base.version} of ${base.model}) has no ${module}.weight for the adapter's ${module}`, { module });
    if (weight.shape.length !== 2 || weight.shape[0] !== out || weight.shape[1] !== inDim) {
      mismatch(
        `the adapter's ${module} is [${out}, ${inDim}] (lora_B·lora_A) but the base's ${module}.weight is [${weight.shape.join(', ')}] (version ${base.version} of ${base.model})`,
        { module },
      );
    }
  }
  // parseAdapterConfig accepted it: the text of a config.
  return loraMetadata({ ...lora, config: lora.config as string });
}

/**
 * The checks of `begin` on an adapter version pushed over the network (a trainer host without a
 * relay of its own, or its forwarding relay): its header's metadata says it is an adapter, and
 * of which base; the relay that takes the push, the master, checks it as it would a local
 * publication, before anything is allocated. A full version passes untouched.
 */
export function checkPushedAdapter(
  pushed: { model: string; version: number; specs: readonly TensorSpec[]; metadata: Readonly<Record<string, string>> },
  findBase: BaseLookup,
): void {
  const base = loraBaseOf(pushed.metadata);
  if (base === null) return;
  const config = pushed.metadata[LORA_CONFIG_KEY];
  checkAdapter(
    {
      model: pushed.model,
      version: pushed.version,
      specs: pushed.specs,
      lora: { baseModel: base.model, ...(base.version !== null ? { baseVersion: base.version } : {}), config },
    },
    findBase,
  );
}
