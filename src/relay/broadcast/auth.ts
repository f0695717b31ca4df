/**
 * Mutual authentication between relays (and remote publishers) from the job's shared secret:
 * a challenge-response with fresh nonces on both sides, so nothing on the wire can be replayed
 * and the secret never travels. Each proof binds the role, the peer's nonce and the prover's id.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { InvalidInputError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';

export const NONCE_BYTES = 16;
const MIN_SECRET_BYTES = 16;

export type AuthRole = 'connector' | 'acceptor';

export function newNonce(): Buffer {
  return randomBytes(NONCE_BYTES);
}

export function proof(secret: Buffer, role: AuthRole, nonce: Uint8Array, proverId: string): Buffer {
  return createHmac('sha256', secret).update(`laminar-peer/1/${role}\u0000`).update(nonce).update(`\u0000${proverId}`).digest();
}

export function checkProof(secret: Buffer, role: AuthRole, nonce: Uint8Array, proverId: string, given: Uint8Array): boolean {
  const expected = proof(secret, role, nonce, proverId);
  return given.byteLength === expected.byteLength && timingSafeEqual(expected, given);
}

/** The shared secret from a file (trailing newline ignored) or a literal; at least 16 bytes. */
export function loadSecret(source: { file?: string; value?: string }): Buffer {
  let secret: Buffer;
  if (source.file !== undefined) {
    try {
      secret = Buffer.from(readFileSync(source.file, 'utf8').replace(/\r?\n$/, ''), 'utf8');
    } catch (err) {
      throw new InvalidInputError(ErrorCodes.SECRET_UNREADABLE, `cannot read the secret file ${source.file}: ${(err as Error).message}`);
    }
  } else if (source.value !== undefined) {
    secret = Buffer.from(source.value, 'utf8');
  } else {
    throw new InvalidInputError(ErrorCodes.SECRET_REQUIRED, 'relays need the job secret (--secret-file or LAMINAR_SECRET)');
  }
  if (secret.byteLength < MIN_SECRET_BYTES) {
    throw new InvalidInputError(ErrorCodes.SECRET_TOO_SHORT, `the job secret must be at least ${MIN_SECRET_BYTES} bytes`);
  }
  return secret;
}
