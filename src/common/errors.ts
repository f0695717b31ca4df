/**
 * One error base class with a stable `code`, and a subclass per condition, so that callers
 * switch on `err.code` and logs and metrics group by it. Codes never change meaning once
 * released; add new ones instead.
 */
export class LaminarError extends Error {
  readonly code: string;
  /** Structured context for logs and error frames (never secrets). */
  readonly details: Record<string, unknown> | undefined;

  constructor(code: string, message: string, options?: { cause?: unknown; details?: Record<string, unknown> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.details = options?.details;
  }

  toJSON(): { code: string; message: string; details?: Record<string, unknown> } {
    return this.details === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, details: this.details };
  }
}

/** A failure of a syscall or library call in the native addon; `code` is the errno name. */
export class NativeError extends LaminarError {
  syscall?: string;
  errno?: number;
  constructor(message: string, code: string) {
    super(code, message);
  }
}

/** Input that does not satisfy a schema or an invariant (frames, tensor lists, options). */
export class InvalidInputError extends LaminarError {
  constructor(code: string, message: string, details?: Record<string, unknown>) {
    super(code, message, details === undefined ? undefined : { details });
  }
}

/** Anything wrong with the framing or encoding of the local protocol. */
export class ProtocolError extends LaminarError {}

export class NotFoundError extends LaminarError {}
export class ConflictError extends LaminarError {}
export class CapacityError extends LaminarError {}
export class TimeoutError extends LaminarError {
  constructor(message: string, details?: Record<string, unknown>) {
    super('ERR_TIMEOUT', message, details === undefined ? undefined : { details });
  }
}
export class IntegrityError extends LaminarError {}
export class ClosedError extends LaminarError {
  constructor(message = 'the connection is closed') {
    super('ERR_CLOSED', message);
  }
}

/** Catalogue of the stable codes used across the project (documented in README). */
export const ErrorCodes = {
  INVALID_ARG: 'ERR_INVALID_ARG',
  BAD_FRAME: 'ERR_BAD_FRAME',
  FRAME_TOO_LARGE: 'ERR_FRAME_TOO_LARGE',
  BAD_REQUEST: 'ERR_BAD_REQUEST',
  UNKNOWN_OP: 'ERR_UNKNOWN_OP',
  PROTOCOL_VERSION: 'ERR_PROTOCOL_VERSION',
  HANDSHAKE_REQUIRED: 'ERR_HANDSHAKE_REQUIRED',
  BAD_TENSOR: 'ERR_BAD_TENSOR',
  BAD_DTYPE: 'ERR_BAD_DTYPE',
  BAD_SHAPE: 'ERR_BAD_SHAPE',
  DUPLICATE_TENSOR: 'ERR_DUPLICATE_TENSOR',
  BAD_MODEL_ID: 'ERR_BAD_MODEL_ID',
  BAD_VERSION: 'ERR_BAD_VERSION',
  BAD_SEGMENT_NAME: 'ERR_BAD_SEGMENT_NAME',
  BAD_SAFETENSORS: 'ERR_BAD_SAFETENSORS',
  UNKNOWN_MODEL: 'ERR_UNKNOWN_MODEL',
  UNKNOWN_VERSION: 'ERR_UNKNOWN_VERSION',
  UNKNOWN_LEASE: 'ERR_UNKNOWN_LEASE',
  UNKNOWN_TENSOR: 'ERR_UNKNOWN_TENSOR',
  VERSION_EXISTS: 'ERR_VERSION_EXISTS',
  VERSION_STALE: 'ERR_VERSION_STALE',
  NOT_WRITING: 'ERR_NOT_WRITING',
  NOT_OWNER: 'ERR_NOT_OWNER',
  INCOMPLETE: 'ERR_INCOMPLETE',
  CHECKSUM_MISMATCH: 'ERR_CHECKSUM_MISMATCH',
  MEMORY_BUDGET: 'ERR_MEMORY_BUDGET',
  SHM_FULL: 'ERR_SHM_FULL',
  TIMEOUT: 'ERR_TIMEOUT',
  CLOSED: 'ERR_CLOSED',
  ABORTED: 'ERR_ABORTED',
  INTERNAL: 'ERR_INTERNAL',
} as const;

/** Turns anything thrown into a LaminarError, keeping the original as `cause`. */
export function toLaminarError(err: unknown): LaminarError {
  if (err instanceof LaminarError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  return new LaminarError(typeof code === 'string' ? code : ErrorCodes.INTERNAL, message, { cause: err });
}
