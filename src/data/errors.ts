/**
 * Errors of the data module (prompt pool, partial-response pool, experience buffer). Each
 * rejection has a stable code, so that callers switch on `err.code` and the rejection
 * counter (`laminar_data_rejections_total{code}`) groups by it. Codes never change meaning.
 */
import { CapacityError, ConflictError, InvalidInputError, LaminarError, NotFoundError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

/** A trajectory, prompt or option that does not satisfy its schema or an invariant. */
export class DataInputError extends InvalidInputError {}

/** The buffer or a payload is over a configured limit. */
export class DataCapacityError extends CapacityError {}

/** Ownership or lease conflicts: someone else holds (or took) the item. */
export class OwnershipError extends ConflictError {}

export class DataNotFoundError extends NotFoundError {}

/** A request that can never be satisfied (a batch larger than the buffer can ever hold). */
export class ImpossibleRequestError extends LaminarError {}

/**
 * Redis or JetStream failed underneath; the original error is the `cause`. The code is ERR_STORE,
 * or a more precise one of the same kind (ERR_NOT_REPLICATED: a write the replicas missed).
 */
export class StoreError extends LaminarError {
  constructor(message: string, cause: unknown, details?: Record<string, unknown>, code: string = ErrorCodes.STORE) {
    super(code, message, { cause, details });
  }
}

export class AbortedError extends LaminarError {
  constructor(message = 'the operation was aborted', cause?: unknown) {
    super(ErrorCodes.ABORTED, message, { cause });
  }
}

/** A stored record or log that cannot be decoded (skipped and counted, never fatal). */
export class CorruptRecordError extends LaminarError {
  constructor(message: string, details?: Record<string, unknown>) {
    super(ErrorCodes.CORRUPT_RECORD, message, details === undefined ? undefined : { details });
  }
}
