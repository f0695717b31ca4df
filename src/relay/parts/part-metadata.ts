/**
 * How a part travels through a trainer host's forwarding relay: the trainer publishes its own
 * tensors into its local relay (any client of the local protocol, the Python one included) with
 * two metadata keys, and the forwarding relay pushes them to the master as that part of the
 * version (src/relay/forwarding.ts). The keys are the part's, not the version's: the assembled
 * version's metadata is what is left.
 *
 *   laminar.part      "k/n": this host's part, k from 1
 *   laminar.manifest  JSON [[name, dtype, [dims...]], ...]: every tensor of the version, in order
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { validateTensorSpecs, type TensorSpec } from '../../safetensors/header.js';
import { parsePartOf, type PartOf } from './part-plan.js';

export const PART_KEY = 'laminar.part';
export const MANIFEST_KEY = 'laminar.manifest';

/** The metadata that makes a local publication part `part` of a version of `manifest`'s tensors. */
export function partMetadata(part: PartOf, manifest: readonly TensorSpec[]): Record<string, string> {
  return {
    [PART_KEY]: `${part.index + 1}/${part.count}`,
    [MANIFEST_KEY]: JSON.stringify(manifest.map((t) => [t.name, t.dtype, t.shape])),
  };
}

/** The part a version's metadata names (null for a whole version), and the version's own metadata. */
export function partOfMetadata(metadata: Record<string, string>): { part: PartOf; manifest: TensorSpec[]; metadata: Record<string, string> } | null {
  const partText = metadata[PART_KEY];
  if (partText === undefined) return null;
  const manifestText = metadata[MANIFEST_KEY];
  if (manifestText === undefined) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${PART_KEY} needs ${MANIFEST_KEY} (every tensor of the version)`);
  let raw: unknown;
  try {
    raw = JSON.parse(manifestText);
  } catch (err) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${MANIFEST_KEY} is not JSON: ${(err as Error).message}`);
  }
  if (!Array.isArray(raw)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${MANIFEST_KEY} must be a list of [name, dtype, shape]`);
  const manifest = validateTensorSpecs(
    raw.map((entry: unknown) => (Array.isArray(entry) ? { name: entry[0] as unknown, dtype: entry[1] as unknown, shape: entry[2] as unknown } : entry)),
  );
  const rest = Object.fromEntries(Object.entries(metadata).filter(([key]) => key !== PART_KEY && key !== MANIFEST_KEY));
  return { part: parsePartOf(partText), manifest, metadata: rest };
}
