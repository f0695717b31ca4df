/**
 * JetStream publishes over one reply subscription: the action client's actions and a worker's
 * results. nats.js's `js.publish` is a request per message, and each request, once answered,
 * builds an Error with a stack for nothing (its cancel path); at a thousand actions a second that
 * was the largest single cost of a publish on the profile. Here each publish carries its own
 * reply subject (`<inbox>.<n>`) on one wildcard subscription, its acknowledgement (PubAck JSON)
 * resolves it, and one timer fails the ones past their timeout.
 *
 * Failures keep the names the retry policy knows (data/retry.ts): `TimeoutError` (no
 * acknowledgement in time) and `NoRespondersError` (no stream took it: no stream, or a cluster
 * between leaders) are transient; an error answer of the stream (over a limit) is final.
 *
 * The message id header is written as bytes here (msg-id-header.ts), and a publish that succeeds
 * at once never enters retryTransient's loop (publishRetrying): both were a few microseconds of
 * every action on the profile of the actions bench.
 */
import { createInbox, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { delay } from '../common/concurrency.js';
import { DEFAULT_RETRY_FOR_MS, isTransient, retryTransient, type RetryOptions } from '../data/retry.js';
import { msgIdHeader } from './msg-id-header.js';

export const PUBLISH_TIMEOUT_MS = 5_000;

export interface StreamAck {
  stream: string;
  seq: number;
  /** The stream had a message of this id within its duplicate window: this one was dropped. */
  duplicate: boolean;
}

class PublishTransportError extends Error {
  constructor(name: 'TimeoutError' | 'NoRespondersError', message: string) {
    super(message);
    this.name = name;
  }
}

/** One decoder for every acknowledgement (a TextDecoder per message cost more than the JSON it read). */
const ACK_TEXT = new TextDecoder();

interface Waiting {
  resolve(ack: StreamAck): void;
  reject(err: Error): void;
  deadline: number;
  subject: string;
}

export class StreamPublisher {
  private readonly inbox = createInbox();
  private readonly waiting = new Map<string, Waiting>();
  private readonly sub: Subscription;
  private readonly sweeper: NodeJS.Timeout;
  private n = 0;
  private closed = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs = PUBLISH_TIMEOUT_MS,
  ) {
    this.sub = nc.subscribe(`${this.inbox}.*`, { callback: (err, msg) => (err ? undefined : this.onAck(msg)) });
    this.sweeper = setInterval(() => this.sweep(), Math.max(100, Math.floor(timeoutMs / 4)));
    this.sweeper.unref();
  }

  /** Publishes `data` to a stream's `subject` with the message id `msgId`; resolves with the stream's acknowledgement. */
  publish(subject: string, data: Uint8Array, msgId: string): Promise<StreamAck> {
    if (this.closed) return Promise.reject(new LaminarError(ErrorCodes.CLOSED, 'the publisher is closed'));
    const token = String(++this.n);
    return new Promise<StreamAck>((resolve, reject) => {
      this.waiting.set(token, { resolve, reject, deadline: Date.now() + this.timeoutMs, subject });
      try {
        this.nc.publish(subject, data, { reply: `${this.inbox}.${token}`, headers: msgIdHeader(msgId) });
      } catch (err) {
        this.waiting.delete(token);
        // A closed connection, or a subject nats.js refuses.
        reject(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  /**
   * publish(), retried through transient failures (retryTransient's policy, `retryForMs` from the
   * first attempt): the first attempt is a plain publish, the retry loop is entered only after it
   * failed.
   */
  publishRetrying(subject: string, data: Uint8Array, msgId: string, options: RetryOptions = {}): Promise<StreamAck> {
    const started = Date.now();
    return this.publish(subject, data, msgId).catch(async (err: unknown) => {
      const retryForMs = (options.retryForMs ?? DEFAULT_RETRY_FOR_MS) - (Date.now() - started);
      if (!isTransient(err) || retryForMs < 0) throw err;
      options.onRetry?.(err, 0);
      // retryTransient's first backoff, then its loop for what is left of the time.
      await delay(25);
      return retryTransient(() => this.publish(subject, data, msgId), { ...options, retryForMs });
    });
  }

  private onAck(msg: Msg): void {
    const token = msg.subject.slice(this.inbox.length + 1);
    const w = this.waiting.get(token);
    if (!w) return;
    this.waiting.delete(token);
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      w.reject(new PublishTransportError('NoRespondersError', `no stream took ${w.subject} (no responders)`));
      return;
    }
    try {
      const ack = JSON.parse(ACK_TEXT.decode(msg.data)) as { stream?: string; seq?: number; duplicate?: boolean; error?: { description?: string } };
      if (ack.error || typeof ack.stream !== 'string')
        throw new LaminarError(ErrorCodes.INTERNAL, `jetstream refused a message on ${w.subject}: ${ack.error?.description ?? 'no acknowledgement'}`);
      w.resolve({ stream: ack.stream, seq: ack.seq ?? 0, duplicate: ack.duplicate ?? false });
    } catch (err) {
      w.reject(err instanceof LaminarError ? err : new LaminarError(ErrorCodes.INTERNAL, `jetstream: an acknowledgement that does not parse on ${w.subject}`));
    }
  }

  private sweep(): void {
    const now = Date.now();
    for (const [token, w] of this.waiting) {
      if (w.deadline > now) continue;
      this.waiting.delete(token);
      w.reject(new PublishTransportError('TimeoutError', `no acknowledgement of a publish on ${w.subject} within ${this.timeoutMs} ms (timeout)`));
    }
  }

  /** Fails what still waits and stops listening. */
  close(): void {
    this.closed = true;
    clearInterval(this.sweeper);
    this.sub.unsubscribe();
    for (const w of this.waiting.values()) w.reject(new LaminarError(ErrorCodes.CLOSED, 'the publisher is closed'));
    this.waiting.clear();
  }
}
