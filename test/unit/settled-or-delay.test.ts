/**
 * settledOrDelay (src/common/concurrency.ts): the rollout agent's idle loop waits for a request to
 * end or 200 ms, whichever is first, on the agent's long-lived closing signal. Waking often on the
 * work must not leave a timer and an abort listener behind per wake (a `Promise.race` against
 * `delay(ms, signal)` kept both for the full delay: MaxListenersExceededWarning on busy agents).
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { settledOrDelay } from '../../src/common/concurrency.js';

describe('settledOrDelay', () => {
  it('resolves with its work and leaves no listener on the signal behind', async () => {
    const closing = new AbortController();
    for (let i = 0; i < 25; i++) await settledOrDelay(Promise.resolve(i), 60_000, closing.signal);
    expect(getEventListeners(closing.signal, 'abort')).toHaveLength(0);
  });

  it('resolves after the delay when the work does not settle, and when the work fails', async () => {
    const closing = new AbortController();
    let waited = false;
    await settledOrDelay(new Promise(() => undefined), 5, closing.signal).then(() => (waited = true));
    expect(waited).toBe(true);
    await expect(settledOrDelay(Promise.reject(new Error('gone')), 60_000, closing.signal)).resolves.toBeUndefined();
    expect(getEventListeners(closing.signal, 'abort')).toHaveLength(0);
  });

  it('resolves at once when the signal aborts', async () => {
    const closing = new AbortController();
    const waiting = settledOrDelay(new Promise(() => undefined), 60_000, closing.signal);
    closing.abort(new Error('closing'));
    await expect(waiting).resolves.toBeUndefined();
  });
});
