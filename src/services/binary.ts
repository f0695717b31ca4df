/** Finds a server binary: an env override, then the caller's preferred directories, then PATH, then the Debian sbin directories. */
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { ServiceError } from './errors.js';
import { ErrorCodes } from '../common/error-codes.js';

// Debian installs nats-server in /usr/sbin, which is not on a normal user's PATH.
const EXTRA_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

export function findBinary(name: string, envVar: string, preferredDirs: readonly string[] = []): string {
  const override = process.env[envVar];
  const candidates = override
    ? [override]
    : [...preferredDirs, ...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...EXTRA_DIRS].map((d) => join(d, name));
  for (const file of candidates) {
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here: try the next one
    }
  }
  throw new ServiceError(
    ErrorCodes.SERVICE_BINARY_MISSING,
    `${name} not found (${override ? `${envVar}=${override} is not executable` : `looked on PATH and in ${EXTRA_DIRS.join(', ')}`}); ` +
      `install it with scripts/bootstrap.sh or set ${envVar}`,
    { details: { name, envVar } },
  );
}
