/**
 * Work the relay starts and nobody awaits: abandoning a transfer, setting up an offered version,
 * receiving a chunk, sending a version downstream. A failure of it is handled here, where it
 * happens: logged with what it was, counted when the caller has a counter, and the relay goes on
 * (each of these leaves the relay consistent when it fails: a transfer abandoned, a partial file
 * the next start deletes, a link dropped). Left unhandled, the rejection would end the relay
 * (src/common/fatal.ts), which is for faults nobody foresaw.
 */
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';

export interface BackgroundOptions {
  /** Counts the failure under `task`. */
  failures?: Counter<'task'>;
  /** What to do beyond logging (drop a link, ...). */
  recover?: (err: unknown) => void;
}

/** Lets `promise` run; a rejection is logged at error as `task` failing, counted, and passed to `recover`. */
export function inBackground(promise: Promise<unknown>, log: Logger, task: string, options: BackgroundOptions = {}): void {
  promise.catch((err: unknown) => {
    options.failures?.inc({ task });
    log.error({ err, task }, `${task} failed (the relay goes on)`);
    options.recover?.(err);
  });
}
