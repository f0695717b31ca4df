/** How a daemon command (relay, sampler, manager, sim-rollout) stops on SIGTERM or SIGINT. */
import type { Logger } from '../common/logger.js';

export interface StopOnSignalsOptions {
  logger: Logger;
  /** Ends what the daemon runs and releases what it holds; the process exits 0 once it resolves, 1 if it fails. */
  close: () => Promise<void>;
  /** The line logged when the first signal arrives (default 'stopping'). */
  message?: string;
  /** Logged with that line besides the signal (read when the signal arrives). */
  details?: () => object;
  /** How long the close may take before the process exits anyway, status 1 (default CLOSE_LIMIT_MS). */
  closeLimitMs?: number;
}

/**
 * A close that has not finished after this long will not: its servers went with it (a job's
 * supervisor killed, every process it started told to stop at once by the parent-death signal,
 * src/common/process.ts), and a drain or flush waits for a NATS or Redis that is not coming back.
 * The process exits then, rather than run on, orphaned, until someone kills it.
 */
export const CLOSE_LIMIT_MS = 60_000;

/**
 * The first SIGTERM or SIGINT closes the daemon and exits; a second one exits at once (status 1),
 * for an operator who will not wait for a close that hangs, and so does the end of `closeLimitMs`.
 */
export function stopOnSignals({ logger, close, message = 'stopping', details, closeLimitMs = CLOSE_LIMIT_MS }: StopOnSignalsOptions): void {
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal, ...details?.() }, message);
    setTimeout(() => {
      logger.error({ signal, closeLimitMs }, 'the close did not finish in time: exiting now');
      process.exit(1);
    }, closeLimitMs).unref();
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'error while stopping');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
