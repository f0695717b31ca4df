/** Errors of the embedded-server helpers (tests, benches and the demo start real servers). */
import { LaminarError } from '../common/errors.js';

export const ServiceErrorCodes = {
  /** The server binary is not installed or not on PATH (run scripts/bootstrap.sh). */
  BINARY_MISSING: 'ERR_SERVICE_BINARY_MISSING',
  /** The server exited or did not accept connections in time. */
  START_FAILED: 'ERR_SERVICE_START_FAILED',
  /** An operation on a server that was stopped or killed for good. */
  STOPPED: 'ERR_SERVICE_STOPPED',
} as const;

export class ServiceError extends LaminarError {}
