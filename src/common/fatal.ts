/**
 * What a daemon does with a fault nobody handled (a promise rejected with no handler): a bug,
 * after which the daemon's state may be inconsistent (a loop that stopped, a flag never reset, a
 * resource never released). Running on would turn the bug into a silently degraded daemon, so it
 * is logged as a fault, counted, and the process ends with EXIT_UNEXPECTED_FAULT for its service
 * manager to start it again (the units in docs/deploy restart on failure). Restart is cheap: a
 * manager's standby, or the restarted manager, takes the job back from the control bucket; a
 * sampler service's trainer reconnects and its batches are assembled again.
 *
 * Every rejection a daemon expects is handled where it happens; this is the backstop.
 */
import type { Counter, Registry } from 'prom-client';
import type { Logger } from './logger.js';
import { counter } from './metric-factory.js';

/** Exit status of a daemon ended by an unexpected fault (70: EX_SOFTWARE, "internal software error", in sysexits.h). */
export const EXIT_UNEXPECTED_FAULT = 70;

export type UnexpectedFaultKind = 'unhandled_rejection';

/** Logs a fault (level fatal, with the stack), counts it when a registry is given, and flushes the log. */
export function recordUnexpectedFault(logger: Logger, registry: Registry | undefined, kind: UnexpectedFaultKind, reason: unknown): void {
  if (registry) unexpectedFaults(registry).inc({ kind });
  // pino's err serializer keeps the type, message and stack of an Error; anything else is logged as it is.
  const fields = reason instanceof Error ? { err: reason } : { reason: String(reason) };
  logger.fatal(
    { ...fields, kind, exitCode: EXIT_UNEXPECTED_FAULT },
    `unexpected fault (${kind.replace('_', ' ')}): exiting for the service manager to restart`,
  );
  logger.flush();
}

/**
 * From now on, a rejection without a handler ends the process with EXIT_UNEXPECTED_FAULT after
 * recordUnexpectedFault(). Install it once, at a daemon's entry point.
 */
export function exitOnUnexpectedRejection(logger: Logger, registry?: Registry): void {
  if (registry) unexpectedFaults(registry);
  process.on('unhandledRejection', (reason) => {
    recordUnexpectedFault(logger, registry, 'unhandled_rejection', reason);
    process.exit(EXIT_UNEXPECTED_FAULT);
  });
}

function unexpectedFaults(registry: Registry): Counter<'kind'> {
  return counter(registry, {
    name: 'laminar_unexpected_faults_total',
    help: 'faults no code path handled (kind: unhandled_rejection); the daemon exits with status 70 after counting one',
    labelNames: ['kind'],
  });
}
