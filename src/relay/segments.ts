/**
 * Names and paths of version segments in the shm directory, and of version directories under
 * its models/ (store/version-dirs.ts). Names are derived, never taken from clients as paths:
 * anything a client sends as a segment name is checked to be a plain file name, so that no
 * request can reach outside the directory.
 */
import { InvalidInputError, ErrorCodes } from '../common/errors.js';

export const COMPLETE_SUFFIX = '.safetensors';
export const WRITING_SUFFIX = '.safetensors.writing';
const SEGMENT_NAME = /^[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,254}$/;
const MAX_MODEL_LENGTH = 256;

export function validateModelId(model: unknown): string {
  // eslint-disable-next-line no-control-regex -- the pattern matches control characters on purpose: a model id must not contain any
  if (typeof model !== 'string' || model.length === 0 || model.length > MAX_MODEL_LENGTH || /[\u0000-\u001f\u007f]/.test(model)) {
    throw new InvalidInputError(ErrorCodes.BAD_MODEL_ID, `model id must be 1-${MAX_MODEL_LENGTH} printable characters, got ${JSON.stringify(model)}`);
  }
  return model;
}

export function validateVersion(version: unknown): number {
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 0) {
    throw new InvalidInputError(ErrorCodes.BAD_VERSION, `version must be a non-negative integer, got ${JSON.stringify(version)}`);
  }
  return version;
}

/** Model ids ("org/name") become file-name-safe: unsafe bytes are written as ~HH. */
function encodeModel(model: string): string {
  let out = '';
  for (const byte of Buffer.from(model, 'utf8')) {
    const ch = String.fromCharCode(byte);
    out += /[A-Za-z0-9._-]/.test(ch) ? ch : `~${byte.toString(16).padStart(2, '0')}`;
  }
  return out;
}

export function segmentBaseName(model: string, version: number): string {
  return `${encodeModel(model)}.v${version}`;
}

/**
 * The directory name of a model under `<shm-dir>/models/`: the same encoding as segment names
 * (`org/name` -> `org~2fname`: every byte outside [A-Za-z0-9._-] as ~HH), and a leading '.' as
 * ~2e too, so that no model is a hidden entry, `.` or `..`. One flat level per model, never a
 * path taken from the id. The encoding is one-to-one (`~` itself is encoded), so two models
 * never share a directory; a model whose segment name fits a file name fits here too.
 */
export function modelDirName(model: string): string {
  const encoded = encodeModel(model);
  return encoded.startsWith('.') ? `~2e${encoded.slice(1)}` : encoded;
}

/** The directory name of a version under its model's: `v<N>`. */
export function versionDirName(version: number): string {
  return `v${version}`;
}

export function validateSegmentName(name: unknown): string {
  if (typeof name !== 'string' || !SEGMENT_NAME.test(name) || name.includes('..')) {
    throw new InvalidInputError(ErrorCodes.BAD_SEGMENT_NAME, `not a segment name: ${JSON.stringify(name)}`);
  }
  return name;
}
