/**
 * Errors of the data module (prompt pool, partial-response pool, experience buffer). Each
 * rejection has a stable code, so that callers switch on `err.code` and the rejection
 * counter (`laminar_data_rejections_total{code}`) groups by it. Codes never change meaning.
 */
import { CapacityError, ConflictError, InvalidInputError, LaminarError, NotFoundError } from '../common/errors.js';

export const DataErrorCodes = {
  // Trajectories (writer input)
  BAD_TRAJECTORY: 'ERR_BAD_TRAJECTORY',
  LENGTH_MISMATCH: 'ERR_LENGTH_MISMATCH',
  NEGATIVE_LENGTH: 'ERR_NEGATIVE_LENGTH',
  FUTURE_VERSION: 'ERR_FUTURE_VERSION',
  PAYLOAD_TOO_LARGE: 'ERR_PAYLOAD_TOO_LARGE',
  UNKNOWN_GROUP: 'ERR_UNKNOWN_GROUP',
  GROUP_MISMATCH: 'ERR_GROUP_MISMATCH',
  BUFFER_FULL: 'ERR_BUFFER_FULL',
  // Prompts
  BAD_PROMPT: 'ERR_BAD_PROMPT',
  DUPLICATE_PROMPT: 'ERR_DUPLICATE_PROMPT',
  LEASE_LOST: 'ERR_LEASE_LOST',
  UNKNOWN_CLAIM: 'ERR_UNKNOWN_CLAIM',
  // Sampler
  BATCH_IMPOSSIBLE: 'ERR_BATCH_IMPOSSIBLE',
  BAD_OPTIONS: 'ERR_BAD_DATA_OPTIONS',
  CORRUPT_RECORD: 'ERR_CORRUPT_RECORD',
  RECORD_MISSING: 'ERR_RECORD_MISSING',
  // Partial-response pool
  NOT_OWNER: 'ERR_NOT_OWNER',
  TRAJECTORY_EXISTS: 'ERR_TRAJECTORY_EXISTS',
  UNKNOWN_TRAJECTORY: 'ERR_UNKNOWN_TRAJECTORY',
  BAD_APPEND: 'ERR_BAD_APPEND',
  // Shared
  STORE: 'ERR_STORE',
  ABORTED: 'ERR_ABORTED',
  TIMEOUT: 'ERR_TIMEOUT',
  CLOSED: 'ERR_CLOSED',
} as const;

export type DataErrorCode = (typeof DataErrorCodes)[keyof typeof DataErrorCodes];

/** A trajectory, prompt or option that does not satisfy its schema or an invariant. */
export class DataInputError extends InvalidInputError {}

/** The buffer or a payload is over a configured limit. */
export class DataCapacityError extends CapacityError {}

/** Ownership or lease conflicts: someone else holds (or took) the item. */
export class OwnershipError extends ConflictError {}

export class DataNotFoundError extends NotFoundError {}

/** A request that can never be satisfied (a batch larger than the buffer can ever hold). */
export class ImpossibleRequestError extends LaminarError {}

/** Redis or JetStream failed underneath; the original error is the `cause`. */
export class StoreError extends LaminarError {
  constructor(message: string, cause: unknown, details?: Record<string, unknown>) {
    super(DataErrorCodes.STORE, message, { cause, details });
  }
}

export class AbortedError extends LaminarError {
  constructor(message = 'the operation was aborted', cause?: unknown) {
    super(DataErrorCodes.ABORTED, message, { cause });
  }
}

/** A stored record or log that cannot be decoded (skipped and counted, never fatal). */
export class CorruptRecordError extends LaminarError {
  constructor(message: string, details?: Record<string, unknown>) {
    super(DataErrorCodes.CORRUPT_RECORD, message, details === undefined ? undefined : { details });
  }
}
