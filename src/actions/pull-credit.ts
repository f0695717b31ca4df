/**
 * A worker's pull requests on its kind's consumer, with exact credit: the server is asked for
 * exactly the slots the worker has free (so a busy worker never holds an action another worker
 * could start), over ONE subscription for the worker's life. nats.js's `fetch()` would make a
 * subscription, a pull request and timers for each batch: at a thousand actions a second, a
 * worker whose slots free one at a time paid that per action.
 *
 * Each pull request asks for a batch on its own reply subject (`<inbox>.<n>`). Deliveries carry
 * their own subject, not the request's, so they are counted against the oldest open request: the
 * server fills one consumer's waiting requests in the order they came. A request ends when it is
 * filled, or with a status on its reply subject (408: expired; 409: refused or cut short; 503: no
 * consumer), after its deliveries on this connection: what is left of it comes back as credit. A request the server lost (a nats-server restart) is given up `LOST_AFTER_MS` after
 * its expiry. Whoever owns the credit (the worker) asks again through `onCredit`.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { createInbox } from '@nats-io/transport-node';
import { ActionDelivery } from './delivery.js';

/** How long a pull request waits on the server for actions before it expires (408). */
export const PULL_EXPIRES_MS = 5_000;
/** A request neither filled nor answered this long after its expiry was lost with its server. */
const LOST_AFTER_MS = 2_000;

interface PullRequest {
  token: string;
  remaining: number;
  expiresAt: number;
}

export interface PullCreditOptions {
  nc: NatsConnection;
  stream: string;
  consumer: string;
  /** Each action delivered. */
  onDelivery(delivery: ActionDelivery): void;
  /** Credit came back unused (a request expired or was refused): `trouble` when it was not a plain expiry. */
  onCredit(trouble: boolean): void;
  expiresMs?: number;
}

export class PullCredit {
  /** Actions asked for and not delivered yet. */
  outstanding = 0;
  private readonly inbox = createInbox();
  private readonly open: PullRequest[] = [];
  private readonly sub: Subscription;
  private readonly nextSubject: string;
  private readonly expiresMs: number;
  private readonly sweeper: NodeJS.Timeout;
  private n = 0;

  constructor(private readonly options: PullCreditOptions) {
    this.expiresMs = options.expiresMs ?? PULL_EXPIRES_MS;
    this.nextSubject = `$JS.API.CONSUMER.MSG.NEXT.${options.stream}.${options.consumer}`;
    this.sub = options.nc.subscribe(`${this.inbox}.*`, { callback: (err, msg) => (err ? undefined : this.onMessage(msg)) });
    this.sweeper = setInterval(() => this.sweep(), this.expiresMs);
    this.sweeper.unref();
  }

  /** Asks the server for `n` more actions. */
  ask(n: number): void {
    if (n <= 0) return;
    const token = String(++this.n);
    this.open.push({ token, remaining: n, expiresAt: Date.now() + this.expiresMs });
    this.outstanding += n;
    this.options.nc.publish(this.nextSubject, JSON.stringify({ batch: n, expires: this.expiresMs * 1_000_000 }), { reply: `${this.inbox}.${token}` });
  }

  private onMessage(msg: Msg): void {
    if (ActionDelivery.isDelivery(msg)) {
      const oldest = this.open[0];
      if (oldest) {
        this.outstanding--;
        if (--oldest.remaining === 0) this.open.shift();
      }
      this.options.onDelivery(new ActionDelivery(this.options.nc, msg));
      return;
    }
    const code = msg.headers?.code ?? 0;
    if (code === 100) return; // an idle heartbeat
    const token = msg.subject.slice(this.inbox.length + 1);
    const at = this.open.findIndex((r) => r.token === token);
    if (at < 0) return;
    // Its deliveries came before its end on this connection, so what is left of it is unfilled.
    this.outstanding -= this.open[at]!.remaining;
    this.open.splice(at, 1);
    this.options.onCredit(code !== 408);
  }

  /** Gives up requests past their expiry whose end never came (their server went away). */
  private sweep(): void {
    const now = Date.now();
    let freed = false;
    while (this.open.length > 0 && this.open[0]!.expiresAt + LOST_AFTER_MS < now) {
      this.outstanding -= this.open.shift()!.remaining;
      freed = true;
    }
    if (freed) this.options.onCredit(true);
  }

  /**
   * Ends the subscription, and with it the open requests (the server drops a waiting request
   * whose reply subject lost its interest). Drained rather than unsubscribed: an action the server
   * sent before it saw the end still reaches `onDelivery` (whose owner hands it back at once),
   * where a plain unsubscribe would drop it on the floor and leave it to wait out the consumer's
   * ack wait (10 s by default) before anyone could run it.
   */
  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    // A second stop gets the first's drain; a closed connection took the subscription with it
    // (the drain refuses): nothing is left to drain either way.
    await this.sub.drain().catch(() => undefined);
  }
}
