/**
 * Trajectory and prompt ids are free-form strings, but NATS subject tokens cannot hold '.',
 * '*', '>' or spaces. Ids become one subject token through base64url (reversible, no padding),
 * so that per-id subjects (dedup, ownership) are exact.
 */
import { DataInputError } from './errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export const MAX_ID_BYTES = 256;

/**
 * A trajectory id is its record's Nats-Msg-Id header, and NATS clients trim header values (and
 * cannot carry CR or LF): " x" and "x" would share a message id, and the server would drop one of
 * the two as a duplicate within its window. So a trajectory id may not begin or end with
 * whitespace (as JavaScript's \s and trim() define it) nor hold control characters (C0, DEL, C1);
 * nor may a prompt id begin with whitespace or hold them, since trajectory ids begin with it.
 */
export const EDGE_WHITESPACE = /^\s|\s$/;
// eslint-disable-next-line no-control-regex -- control characters are exactly what it finds
export const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;

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
