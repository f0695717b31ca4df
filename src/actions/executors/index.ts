/** The executors `laminar action-worker --executor` runs: their tools by name. */
import { LaminarError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';
import type { ActionHandler } from '../handler.js';
import { LOOKUP_TOOL, lookupHandler } from './lookup.js';
import { NOOP_TOOL, noopHandler } from './noop.js';
import { SANDBOX_TOOL, checkSandbox, sandboxHandler, type SandboxLimits } from './sandbox.js';

export const EXECUTORS = ['sandbox', 'lookup', 'noop'] as const;
export type ExecutorName = (typeof EXECUTORS)[number];

export function executorTools(name: string, sandbox: Partial<SandboxLimits> = {}): Record<string, ActionHandler> {
  switch (name) {
    case 'sandbox':
      checkSandbox();
      return { [SANDBOX_TOOL]: sandboxHandler(sandbox) };
    case 'lookup':
      return { [LOOKUP_TOOL]: lookupHandler };
    case 'noop':
      return { [NOOP_TOOL]: noopHandler };
    default:
      throw new LaminarError(ErrorCodes.BAD_ACTION, `unknown executor ${JSON.stringify(name)} (${EXECUTORS.join(', ')})`);
  }
}

export { LOOKUP_TOOL, LOOKUP_DEFAULT_LENGTH, LOOKUP_MAX_LENGTH, fnv1a32, lookupDigits, lookupHandler } from './lookup.js';
export { NOOP_TOOL, noopHandler } from './noop.js';
export { SANDBOX_TOOL, DEFAULT_SANDBOX_LIMITS, checkSandbox, sandboxHandler, type SandboxLimits } from './sandbox.js';
