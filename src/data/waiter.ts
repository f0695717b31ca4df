/**
 * "Something changed" notifications for blocking calls: a waiter sleeps until notify(), a
 * deadline or an AbortSignal, whichever comes first. Callers re-check their condition after
 * each wake-up, so spurious wake-ups are harmless.
 */
import { TimeoutError } from '../common/errors.js';
import { AbortedError } from './errors.js';

export class ChangeNotifier {
  private waiters = new Set<() => void>();

  notify(): void {
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) w();
  }

  /** Resolves on the next notify(); rejects with ERR_TIMEOUT at `deadline` or ERR_ABORTED on abort. */
  wait(options: { deadline?: number; signal?: AbortSignal | undefined; what?: string } = {}): Promise<void> {
    const { deadline, signal } = options;
    if (signal?.aborted) return Promise.reject(new AbortedError(`${options.what ?? 'wait'} aborted`, signal.reason));
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        if (timer) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.waiters.delete(wake);
      };
      const wake = (): void => {
        done();
        resolve();
      };
      const onAbort = (): void => {
        done();
        reject(new AbortedError(`${options.what ?? 'wait'} aborted`, signal?.reason));
      };
      this.waiters.add(wake);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (deadline !== undefined && Number.isFinite(deadline)) {
        timer = setTimeout(
          () => {
            done();
            reject(new TimeoutError(`${options.what ?? 'wait'} timed out`));
          },
          Math.max(0, deadline - Date.now()),
        );
      }
    });
  }
}
