/**
 * Trajectory and prompt ids are free-form strings, but NATS subject tokens cannot hold '.',
 * '*', '>' or spaces. Ids become one subject token through base64url (reversible, no padding),
 * so that per-id subjects (dedup, ownership) are exact.
 */
import { DataInputError } from './errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export const MAX_ID_BYTES = 256;

export function idToken(id: string): string {
  return Buffer.from(id, 'utf8').toString('base64url');
}

export function tokenToId(token: string): string {
  return Buffer.from(token, 'base64url').toString('utf8');
}

/**
 * The trajectory id a per-id subject names (an experience record or chunk, a partial log): the
 * inverse of BufferNames.recordSubject and PartialNames.subject, for tools that watch them.
 */
export function trajectoryIdOfSubject(subject: string): string {
  return tokenToId(subject.slice(subject.lastIndexOf('.') + 1));
}

/** Checks the name of a buffer or pool: it becomes part of stream and subject names. */
export function checkName(kind: string, name: string): string {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
    throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `${kind} name must be 1-64 characters of [A-Za-z0-9_-], got ${JSON.stringify(name)}`);
  }
  return name;
}
