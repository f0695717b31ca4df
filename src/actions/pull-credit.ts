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
/**
 * The longest stop() waits for its open requests to be filled or to end before it drops their
 * interest: the time an action already on its way takes to arrive (stop() says why).
 */
export const STOP_LINGER_MS = 250;

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
  /** The longest stop() waits for open requests to be filled or to end (default STOP_LINGER_MS). */
  stopLingerMs?: number;
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
  private stopped = false;
  /** Called when the last open request is filled or ends (stop() waits on it). */
  private noneOpen: (() => void) | undefined;

  constructor(private readonly options: PullCreditOptions) {
    this.expiresMs = options.expiresMs ?? PULL_EXPIRES_MS;
    this.nextSubject = `$JS.API.CONSUMER.MSG.NEXT.${options.stream}.${options.consumer}`;
    this.sub = options.nc.subscribe(`${this.inbox}.*`, { callback: (err, msg) => (err ? undefined : this.onMessage(msg)) });
    this.sweeper = setInterval(() => this.sweep(), this.expiresMs);
    this.sweeper.unref();
  }

  /** Asks the server for `n` more actions. */
  ask(n: number): void {
    if (n <= 0 || this.stopped) return;
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
      if (this.open.length === 0) this.noneOpen?.();
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
    if (this.open.length === 0) this.noneOpen?.();
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
   *
   * The drain does not close the window on the server's side: nats-server checks that a waiting
   * request's reply subject has interest, then sends the action through its consumer's queue, and
   * an end that lands in between drops an action the consumer counts as delivered (a clean-clone
   * CI run saw it once in 20 rounds of test/actions/pull-credit.test.ts: an action published just
   * before the stop). So the end waits until the open requests are filled or ended, at most
   * STOP_LINGER_MS: an action already on its way arrives in that time, and what is left is an
   * action reaching the consumer in the microseconds of the end itself.
   */
  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    this.stopped = true;
    if (this.open.length > 0)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.options.stopLingerMs ?? STOP_LINGER_MS);
        this.noneOpen = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    this.noneOpen = undefined;
    // A second stop gets the first's drain; a closed connection took the subscription with it
    // (the drain refuses): nothing is left to drain either way.
    await this.sub.drain().catch(() => undefined);
  }
}
