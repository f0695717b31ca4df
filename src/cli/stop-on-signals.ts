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
}

/**
 * The first SIGTERM or SIGINT closes the daemon and exits; a second one exits at once (status 1),
 * for an operator who will not wait for a close that hangs.
 */
export function stopOnSignals({ logger, close, message = 'stopping', details }: StopOnSignalsOptions): void {
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal, ...details?.() }, message);
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
