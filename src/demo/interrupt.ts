/** How the demo, the soak and the weight-path demo end early on a signal. */
/**
 * Ctrl-C or SIGTERM (a `timeout`, a CI runner, a service manager): the run stops what it started
 * and removes its directories instead of dying with its daemons and shared memory left behind.
 * A second signal while it stops ends it at once (the servers' exit hook still kills them:
 * managed-process.ts). `exitCode`: 130 after SIGINT, 143 after SIGTERM, as a shell reports a
 * process those signals ended. The listeners stay registered (not `once`): the exit hook of
 * managed-process.ts acts only when it is a signal's sole listener.
 */
export function onInterrupt(): { signal: AbortSignal; readonly interrupted: boolean; readonly exitCode: number } {
  const stop = new AbortController();
  let exitCode = 0;
  const listeners = new Map<NodeJS.Signals, () => void>();
  const interrupt = (signal: NodeJS.Signals, code: number) => (): void => {
    if (stop.signal.aborted) {
      for (const [s, listener] of listeners) process.off(s, listener);
      process.kill(process.pid, signal);
      return;
    }
    exitCode = code;
    process.stdout.write(`\n${signal === 'SIGINT' ? 'interrupted' : 'terminated'}: stopping every process (${signal} again to end at once)\n`);
    stop.abort();
  };
  listeners.set('SIGINT', interrupt('SIGINT', 130));
  listeners.set('SIGTERM', interrupt('SIGTERM', 143));
  for (const [s, listener] of listeners) process.on(s, listener);
  return {
    signal: stop.signal,
    get interrupted() {
      return stop.signal.aborted;
    },
    get exitCode() {
      return exitCode;
    },
  };
}
