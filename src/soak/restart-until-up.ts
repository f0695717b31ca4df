/**
 * Starts a server the soak took down and keeps starting it until it is up, as a service manager
 * would. A start can fail under the soak's own load: after a whole-cluster restart a nats-server
 * reports healthy only once its peers are back and its streams restored, which took 15-19 s at a
 * load of 40-57, and a start that gave up then left NATS down until the next fault happened to
 * restart it (8 minutes once, in the 2-hour cluster soak). Each failed attempt is reported; the
 * next comes after a growing pause, and only after `giveUpMs` without success does the end of the
 * fault fail.
 */
import { delay } from '../common/concurrency.js';

export interface RestartTarget {
  readonly name: string;
  /** Undefined while the process is down. */
  readonly pid: number | undefined;
  /** Stops what is left and starts again; throws when the start fails (the process is down again). */
  restart(): Promise<void>;
}

export interface RestartOptions {
  /** Called after each failed attempt, before the pause that follows it. */
  onFailure?: (attempt: number, err: Error) => void;
  /** Pause after the first failure; doubled after each further one, up to `maxPauseMs`. */
  firstPauseMs?: number;
  maxPauseMs?: number;
  /** How long to keep trying before the last failure is thrown (default 5 minutes). */
  giveUpMs?: number;
}

/** Starts `target` until an attempt succeeds; resolves at once when it is already up. */
export async function restartUntilUp(target: RestartTarget, options: RestartOptions = {}): Promise<void> {
  const deadline = Date.now() + (options.giveUpMs ?? 300_000);
  let pauseMs = options.firstPauseMs ?? 1000;
  for (let attempt = 1; target.pid === undefined; attempt++) {
    try {
      await target.restart();
      return;
    } catch (err) {
      options.onFailure?.(attempt, err as Error);
      if (Date.now() + pauseMs > deadline) throw err;
    }
    await delay(pauseMs);
    pauseMs = Math.min(pauseMs * 2, options.maxPauseMs ?? 10_000);
  }
}
