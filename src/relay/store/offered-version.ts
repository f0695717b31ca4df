/**
 * A version another relay (or a remote publisher) offers over the broadcast: its header parsed
 * and checked before the store sets any memory aside for it. Separate from the broadcaster,
 * which only carries the bytes, because what a header must say to be stored is the store's rule.
 */
import { ErrorCodes, IntegrityError } from '../../common/errors.js';
import { parseHeader, readHeaderLength, type VersionLayout } from '../../safetensors/header.js';
import { validateModelId } from '../segments.js';

/** A version another relay offered: its header, parsed and checked, before any memory is set aside. */
export interface OfferedVersion {
  model: string;
  version: number;
  layout: VersionLayout;
  metadata: Record<string, string>;
  checksums: string[];
  /** The sender's safetensors header (the first dataOffset bytes of its segment). */
  header: Uint8Array;
}

/** Parses and checks the header of an offered version (`size` bytes in all, said to be `expect`). */
export function parseOffered(header: Uint8Array, size: number, expect: { model: string; version: number }): OfferedVersion {
  const n = readHeaderLength(header, size);
  if (8 + n !== header.byteLength) {
    throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, `header of ${header.byteLength} bytes announces ${8 + n}`);
  }
  const parsed = parseHeader(header.subarray(8), size);
  if (!parsed.laminar) throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, 'the offered version has no laminar metadata');
  const { model, version, checksums } = parsed.laminar;
  if (model !== expect.model || version !== expect.version) {
    throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, `the offered header is ${model} v${version}, not ${expect.model} v${expect.version}`);
  }
  validateModelId(model);
  return { model, version, layout: parsed.layout, metadata: parsed.metadata, checksums, header };
}
