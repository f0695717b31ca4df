/**
 * What an adapter version's directory holds: PEFT's layout, which SGLang's and vLLM's
 * load_lora_adapter and PEFT's from_pretrained read. `adapter_model.safetensors` is the hard link
 * to the segment (a valid safetensors file whose tensors carry PEFT's names: laminar's own
 * metadata keys beside them are ignored by every reader), and `adapter_config.json` the text the
 * publisher gave. No engine files: an adapter directory is loaded into an engine already serving
 * the base, never used to start one.
 */
import { ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, LORA_CONFIG_KEY, versionKind } from './metadata.js';

export interface AdapterDirContents {
  weightsFile: string;
  linkEngineFiles: false;
  written: ReadonlyMap<string, string>;
}

/** The directory contents of an adapter version; null for a full version. */
export function adapterDirContents(metadata: Readonly<Record<string, string>>): AdapterDirContents | null {
  if (versionKind(metadata) !== 'lora') return null;
  return { weightsFile: ADAPTER_WEIGHTS_FILE, linkEngineFiles: false, written: new Map([[ADAPTER_CONFIG_FILE, metadata[LORA_CONFIG_KEY] ?? '{}']]) };
}
