import { ErrorCodes } from './error-codes.js';

export { ERROR_CATALOGUE, ErrorCodes, type ErrorCode, type ErrorArea, type ErrorCodeName } from './error-codes.js';

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
    return this.details === undefined ? { code: this.code, message: this.message } : { code: this.code, message: this.message, details: this.details };
  }
}

/**
 * How a script (the demo, the soak) reports what ended it: a LaminarError (a refused flag, a
 * missing environment) as its code and message, as `laminar` does; anything else, a bug or an
 * unexpected fault, with its stack.
 */
export function describeFailure(err: unknown): string {
  if (err instanceof LaminarError) return `${err.code}: ${err.message}`;
  return err instanceof Error ? (err.stack ?? err.message) : String(err);
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
    super(ErrorCodes.TIMEOUT, message, details === undefined ? undefined : { details });
  }
}
export class IntegrityError extends LaminarError {}
export class ClosedError extends LaminarError {
  constructor(message = 'the connection is closed') {
    super(ErrorCodes.CLOSED, message);
  }
}

/** Turns anything thrown into a LaminarError, keeping the original as `cause`. */
export function toLaminarError(err: unknown): LaminarError {
  if (err instanceof LaminarError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  return new LaminarError(typeof code === 'string' ? code : ErrorCodes.INTERNAL, message, { cause: err });
}
