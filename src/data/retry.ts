/**
 * Retries of idempotent JetStream calls through a server restart or a lost connection. Only
 * transport failures are retried (timeouts, no responders, disconnects); an answer from the
 * server (JetStreamApiError: "no") is returned to the caller at once, except "try again later".
 */
import { JetStreamApiError } from '@nats-io/jetstream';
import { delay } from '../common/concurrency.js';

/** How long retryTransient keeps trying unless told otherwise. */
export const DEFAULT_RETRY_FOR_MS = 30_000;

export interface RetryOptions {
  /** Give up after this long. Default DEFAULT_RETRY_FOR_MS (30 s). */
  retryForMs?: number;
  onRetry?: (err: unknown, attempt: number) => void;
  /** Narrows the errors retried: a transient error this says no to is thrown at once. */
  retryIf?: (err: unknown) => boolean;
}

const TRANSIENT = new Set(['TimeoutError', 'NoRespondersError', 'RequestError', 'ConnectionError']);
/**
 * What the JetStream client makes of "no responders" to a publish or an API request (its cause).
 * On a cluster it is the moment between the loss of a stream's leader (or of the server a client
 * was on) and the new leader's interest reaching the server the client now uses: seen when a
 * buffer stream's leader was SIGKILLed under writers (test/cluster-nats/leader-kill.test.ts).
 */
const NO_STREAM_RESPONDER = new Set(['JetStreamNotEnabled']);
/**
 * JetStream's "cluster not available" (err_code 10008, status 503, "JetStream system temporarily
 * unavailable"): the server asked knows no leader for the stream, during an election. A read from
 * the stream's leader (leader-read.ts) asked of a replica cut off from the others gets it, where
 * the direct get it replaced answered from the replica's own, possibly stale, copy.
 */
const CLUSTER_NOT_AVAILABLE = 10008;

export function isTransient(err: unknown): boolean {
  if (err instanceof JetStreamApiError) return err.code === CLUSTER_NOT_AVAILABLE;
  if (!(err instanceof Error)) return false;
  // A closed or draining connection is final: retrying cannot help.
  if (err.name === 'ClosedConnectionError' || err.name === 'DrainingConnectionError') return false;
  // The server refused this client the subject (a RequestError caused by it): its answer, not a transport failure.
  if (err.name === 'PermissionViolationError' || (err.cause as Error | undefined)?.name === 'PermissionViolationError') return false;
  return TRANSIENT.has(err.name) || NO_STREAM_RESPONDER.has(err.name) || /timeout|no responders|503/i.test(err.message);
}

export async function retryTransient<T>(fn: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const deadline = Date.now() + (options.retryForMs ?? DEFAULT_RETRY_FOR_MS);
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!isTransient(err) || options.retryIf?.(err) === false || Date.now() > deadline) throw err;
      options.onRetry?.(err, attempt);
      // Capped exponential backoff: 25 ms, 50 ms, ... 1 s.
      await delay(Math.min(1000, 25 * 2 ** attempt));
    }
  }
}
