/** Small concurrency helpers shared by daemons. */

/** Runs fn over items with at most `limit` promises in flight; results keep the input order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

export interface DelayOptions {
  signal?: AbortSignal;
  /** The timer does not keep the process alive (a retry loop of a component being shut down). */
  unref?: boolean;
}

/**
 * Resolves after ms, or rejects with the signal's reason when aborted first. The second argument
 * is the signal itself or DelayOptions.
 */
export function delay(ms: number, options?: AbortSignal | DelayOptions): Promise<void> {
  const { signal, unref = false } = options instanceof AbortSignal ? { signal: options } : (options ?? {});
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (unref) timer.unref();
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Resolves when `work` settles or `ms` have passed, whichever comes first, or at once when `signal`
 * (if given) aborts; never rejects. The timer and its listener on `signal` go as soon as it
 * resolves: a `Promise.race` of `work` against `delay(ms, signal)` would keep both for the full
 * `ms`, and a loop that wakes often on `work` piles listeners up on a long-lived signal meanwhile.
 */
export async function settledOrDelay(work: Promise<unknown>, ms: number, signal?: AbortSignal): Promise<void> {
  const done = new AbortController();
  try {
    await Promise.race([work.catch(() => undefined), delay(ms, signal ? AbortSignal.any([signal, done.signal]) : done.signal).catch(() => undefined)]);
  } finally {
    done.abort();
  }
}

/** Work on its way that a close must wait for (claims, loads): tracked from start to settle. */
export class InFlight {
  private readonly pending = new Set<Promise<unknown>>();

  get size(): number {
    return this.pending.size;
  }

  /** Tracks `work` until it settles; returns it. */
  track<T>(work: Promise<T>): Promise<T> {
    this.pending.add(work);
    const done = (): void => void this.pending.delete(work);
    work.then(done, done);
    return work;
  }

  /** Resolves once everything tracked now has settled, whatever its outcome. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.pending]);
  }
}
