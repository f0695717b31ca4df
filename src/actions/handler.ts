/** What a tool author writes: a handler per tool, given the arguments and the action's context. */
import { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface ActionContext {
  actionId: string;
  trajectoryId: string;
  jobId: string;
  kind: string;
  tool: string;
  /** 1 for the first delivery; more when a worker died or hung with this action before. */
  delivery: number;
  timeoutMs: number;
  /** Aborted at the action's timeout (and when the worker is stopped for good): stop working. */
  signal: AbortSignal;
}

/**
 * A tool: returns its output (text), or throws. Throw ActionArgumentError for arguments of the
 * wrong shape (the result's status is then 'bad_call'); anything else thrown is status 'error'
 * with the message. Handlers may run more than once for one action (at-least-once): see
 * docs/components/actions.md, "What a tool author must do".
 */
export type ActionHandler = (args: unknown, context: ActionContext) => string | Promise<string>;

/** Arguments a tool cannot take: the result has status 'bad_call' and code ERR_ACTION_BAD_ARGS. */
export class ActionArgumentError extends LaminarError {
  constructor(message: string) {
    super(ErrorCodes.ACTION_BAD_ARGS, message);
  }
}

/** The arguments as an object (a map), or ActionArgumentError. */
export function argsObject(args: unknown, tool: string): Record<string, unknown> {
  if (args === null || typeof args !== 'object' || Array.isArray(args)) throw new ActionArgumentError(`${tool} takes an object of named arguments`);
  return args as Record<string, unknown>;
}

/** A string argument, or ActionArgumentError naming it. */
export function stringArg(args: Record<string, unknown>, name: string, tool: string): string {
  const v = args[name];
  if (typeof v !== 'string') throw new ActionArgumentError(`${tool}: argument ${name} must be a string, got ${v === undefined ? 'none' : typeof v}`);
  return v;
}
