/**
 * One delivery of an action from its kind's consumer, as the worker handles it: the message's
 * bytes and the acknowledgements JetStream understands, sent on the delivery's reply subject
 * (`$JS.ACK.<stream>.<consumer>.<deliveries>.<stream seq>.<delivery seq>.<ns>.<pending>`, with
 * a domain and account hash in front on newer servers). A core-NATS publish each, nothing
 * awaited: what nats.js's JsMsg does, without the fetch machinery around it (pull-credit.ts).
 */
import type { Msg, NatsConnection } from '@nats-io/transport-node';

const ACK = new TextEncoder().encode('+ACK');
const NAK = new TextEncoder().encode('-NAK');
const WORKING = new TextEncoder().encode('+WPI');

export class ActionDelivery {
  /** The subject acknowledgements go to. */
  private readonly reply: string;
  /** Deliveries of this action so far, this one included. */
  readonly deliveryCount: number;
  /** The action's sequence in the work-queue stream. */
  readonly seq: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly msg: Msg,
  ) {
    this.reply = msg.reply ?? '';
    const tokens = this.reply.split('.');
    // Old form: 9 tokens; new form: domain and account hash after "$JS.ACK" (11 or 12).
    const at = tokens.length === 9 ? 4 : 6;
    this.deliveryCount = Number(tokens[at]);
    this.seq = Number(tokens[at + 1]);
  }

  get data(): Uint8Array {
    return this.msg.data;
  }

  /** Done: the work queue removes the action. */
  ack(): void {
    this.nc.publish(this.reply, ACK);
  }

  /** Handed back for another worker now, rather than after the ack wait. */
  nak(): void {
    this.nc.publish(this.reply, NAK);
  }

  /** Still running: the ack wait starts again. */
  working(): void {
    this.nc.publish(this.reply, WORKING);
  }

  /** Never to be delivered again (it does not decode). */
  term(reason: string): void {
    this.nc.publish(this.reply, `+TERM ${reason}`);
  }

  /** Whether a message of a pull request's reply subject is a delivery (not a status: 408 request expired, 409, 100 heartbeat). */
  static isDelivery(msg: Msg): boolean {
    return msg.reply?.startsWith('$JS.ACK.') ?? false;
  }
}
