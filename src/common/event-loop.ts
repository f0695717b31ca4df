/**
 * Says when this process's event loop was held up. A daemon whose loop stalls answers nobody
 * meanwhile: its heartbeats stop, its peers time it out, a relay's broadcast links go quiet. The
 * default metrics carry the lag as a number; this names each long hold-up in the log, with its
 * length, next to whatever else the daemon logged at the time, and counts it.
 *
 * One timer tick a second (unref'd): an idle daemon wakes no more often than the default
 * metrics' own lag sampling already makes it.
 */
import type { Registry } from 'prom-client';
import { counter } from './metric-factory.js';
import type { Logger } from './logger.js';

export interface EventLoopWatchOptions {
  registry: Registry;
  log: Logger;
  /** A tick this much later than due is a hold-up (default 500 ms). */
  thresholdMs?: number;
  /** Tick period (default 1 s). */
  intervalMs?: number;
}

export interface EventLoopWatch {
  /** Hold-ups seen so far. */
  readonly holdups: number;
  stop(): void;
}

export function watchEventLoop(options: EventLoopWatchOptions): EventLoopWatch {
  const thresholdMs = options.thresholdMs ?? 500;
  const intervalMs = options.intervalMs ?? 1000;
  const name = 'laminar_event_loop_holdups_total';
  // Several daemons may share a process (tests, the demo): one counter per registry.
  const holdupCounter = counter(options.registry, { name, help: `Times the event loop ran a timer more than ${thresholdMs} ms late` });
  let holdups = 0;
  let due = performance.now() + intervalMs;
  const timer = setInterval(() => {
    const now = performance.now();
    const lateMs = now - due;
    due = now + intervalMs;
    if (lateMs < thresholdMs) return;
    holdups++;
    holdupCounter.inc();
    options.log.warn({ heldUpMs: Math.round(lateMs) }, 'event loop held up: nothing was answered meanwhile');
  }, intervalMs);
  timer.unref();
  return {
    get holdups() {
      return holdups;
    },
    stop: () => clearInterval(timer),
  };
}
