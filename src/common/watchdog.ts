/**
 * A periodic check for peers that went quiet, which does not mistake this process's own stall
 * for theirs. After the event loop was held up (a long synchronous stretch, a GC pause), due
 * timers may run before the I/O that arrived meanwhile is dispatched, and whatever the peer
 * could not answer while we were not listening would count against it. Such a late tick is
 * flagged; the check then does not judge the peer by the time spent held up.
 */
export interface Watchdog {
  stop(): void;
}

/**
 * Calls `check(heldUp)` every `intervalMs` (the timer does not keep the process alive).
 * `heldUp` is true when the tick came more than an interval late.
 */
export function watchdog(intervalMs: number, check: (heldUp: boolean) => void): Watchdog {
  let lastTick = Date.now();
  const timer = setInterval(() => {
    const now = Date.now();
    const heldUp = now - lastTick > 2 * intervalMs;
    lastTick = now;
    check(heldUp);
  }, intervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
