/**
 * Pinning complete versions in RAM (mlock), one at a time in the background. Separate because it
 * is a queue with its own failure mode: the kernel may refuse (RLIMIT_MEMLOCK, no CAP_IPC_LOCK),
 * after which the relay runs on unpinned and says so once.
 */
import type { Logger } from 'pino';
import type { RelayMetrics } from '../metrics.js';
import type { StoredVersion } from './stored-version.js';

export class PinQueue {
  private queue: Promise<void> = Promise.resolve();
  private works = true;
  private refusalLogged = false;

  constructor(private readonly options: { pin: boolean; logger: Logger; metrics: RelayMetrics }) {}

  /**
   * Pins a complete version in RAM, in the background and one version at a time: mlock of
   * gigabytes takes a while (cheapest on the read-only mapping of a finished segment) and nobody
   * should wait for it. When the kernel refuses once, the relay says so and stops trying.
   */
  pin(v: StoredVersion): void {
    if (!this.options.pin) return;
    this.queue = this.queue.then(async () => {
      const mapping = v.mapping;
      if (!this.works || !mapping || mapping.closed || v.state !== 'complete') return;
      const refused = await mapping.lockAsync().catch((err: unknown) => String((err as { code?: unknown }).code ?? err));
      v.pinned = refused === null && !mapping.closed;
      if (refused === null) return;
      this.options.metrics.pinFailures.inc();
      this.works = false;
      if (!this.refusalLogged) {
        this.refusalLogged = true;
        this.options.logger.warn(
          { errno: refused, size: v.layout.totalSize },
          'mlock refused (RLIMIT_MEMLOCK or CAP_IPC_LOCK): the relay keeps running with unpinned versions; raise `ulimit -l` to pin',
        );
      }
    });
  }

  /** Resolves when every pin requested so far has been tried. */
  settled(): Promise<void> {
    return this.queue;
  }

  /** Whether pinning works on this host (false after the kernel refused once). */
  get enabled(): boolean {
    return this.options.pin && this.works;
  }
}
