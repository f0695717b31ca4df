import type { Mapping, UcxNativeWorker } from '../native/index.js';
import { ClosedError, LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import type { IncomingMessage } from './message.js';

/** Send flag: always use the rendezvous protocol (the receiver pulls the bytes into place). */
const SEND_RENDEZVOUS = 1;
/** Send flag: always use the eager protocol (the payload travels with the message). */
const SEND_EAGER = 2;

/**
 * How long a forced close waits for UCX to report it done. A forced close cancels what the
 * endpoint had in flight, and UCX completes it once its lanes are flushed with cancellation; a
 * lane still connecting, or one whose socket buffer a peer that is gone but not yet noticed
 * never drains, keeps it pending until UCX's own timeouts (minutes). The endpoint is unusable
 * from the call on: nobody need wait longer, and the worker's close frees what is still pending.
 */
export const FORCED_CLOSE_WAIT_MS = 1000;

/** `closing`, settled or not, after at most `ms`. */
function bounded(closing: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
    timer.unref();
  });
  return Promise.race([closing.catch(() => undefined), waited]).finally(() => clearTimeout(timer));
}

export interface Payload {
  source: Mapping | Uint8Array;
  offset: number;
  length: number;
  /** Force rendezvous, so the receiver chooses where the bytes land (default: true). */
  rendezvous?: boolean;
  /**
   * Force the eager protocol: the payload arrives inline with the message (`IncomingMessage.data`)
   * whatever its size, where UCX left to choose (`rendezvous: false`) switches to rendezvous past
   * its threshold (64 KiB on TCP). Keep it below the receiver's `maxEagerBytes`. Wins over
   * `rendezvous`.
   */
  eager?: boolean;
}

export type MessageHandler = (message: IncomingMessage) => void;
export type CloseHandler = (error: LaminarError | undefined) => void;

/**
 * A connection to one peer. Messages are delivered to `onMessage` in arrival order; a failure of
 * the peer (process killed, connection reset, unreachable) arrives at once as the error given to
 * the close handlers, after which every pending send has been rejected.
 */
export class Endpoint {
  /** Set by the owner; a message with no handler has its payload released. */
  onMessage: MessageHandler | undefined;
  private closeHandlers: CloseHandler[] = [];
  private state: 'open' | 'closing' | 'closed' = 'open';
  private failure: LaminarError | undefined;

  constructor(
    private readonly worker: UcxNativeWorker,
    readonly id: number,
    /** The peer's address as the transport sees it ("10.77.0.2:41234"). */
    readonly peer: string,
    private readonly forget: (id: number) => void,
    /** Told when a close handler throws (the worker reports it; the other handlers still run). */
    private readonly handlerFailed: (endpoint: Endpoint, err: unknown) => void = () => undefined,
  ) {}

  get closed(): boolean {
    return this.state !== 'open';
  }

  /** Why the endpoint closed, when it failed. */
  get error(): LaminarError | undefined {
    return this.failure;
  }

  onClose(handler: CloseHandler): void {
    if (this.state !== 'closed') {
      this.closeHandlers.push(handler);
      return;
    }
    queueMicrotask(() => {
      try {
        handler(this.failure);
      } catch (err) {
        this.handlerFailed(this, err);
      }
    });
  }

  /**
   * Sends a header and an optional payload; resolves when the payload memory may be reused.
   * Every failure, bad arguments included, is a rejection: callers chain .then/.catch on it.
   */
  send(header: Uint8Array, payload?: Payload): Promise<void> {
    if (this.state !== 'open') return Promise.reject(this.failure ?? new ClosedError('the endpoint is closed'));
    try {
      if (payload === undefined) return this.worker.send(this.id, header, null, 0, 0, 0);
      const flags = payload.eager === true ? SEND_EAGER : payload.rendezvous === false ? 0 : SEND_RENDEZVOUS;
      return this.worker.send(this.id, header, payload.source, payload.offset, payload.length, flags);
    } catch (err) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on what the native addon threw, unchanged, as the rejection
      return Promise.reject(err);
    }
  }

  /** UCX's description of the lanes and transports this endpoint uses. */
  info(): string {
    return this.state === 'open' ? this.worker.endpointInfo(this.id) : '';
  }

  /**
   * Closes the endpoint (flushing unless `force`); pending sends are cancelled. A forced close
   * also cuts short a graceful close in flight.
   */
  async close(force = false): Promise<void> {
    if (this.state === 'closing' && force) {
      await bounded(this.worker.closeEndpoint(this.id, true), FORCED_CLOSE_WAIT_MS);
      this.finish(this.failure);
      return;
    }
    if (this.state !== 'open') return;
    this.state = 'closing';
    const closing = this.worker.closeEndpoint(this.id, force);
    // A close that fails leaves nothing to clean up on our side: the endpoint is gone. A graceful
    // one waits for what was sent to leave (a forced close cuts it short); a forced one is bounded.
    if (force) await bounded(closing, FORCED_CLOSE_WAIT_MS);
    else await closing.catch(() => undefined);
    this.finish(undefined);
  }

  /**
   * Closes at once and reports `error` to the close handlers, as a transport failure would. The
   * native layer calls it when UCX reports the peer failed; an owner calls it for failures only
   * it can see (a peer that went silent).
   */
  abort(error: LaminarError): void {
    if (this.state === 'closed') return;
    this.failure = error;
    this.state = 'closing';
    void bounded(this.worker.closeEndpoint(this.id, true), FORCED_CLOSE_WAIT_MS).then(() => this.finish(error));
  }

  /**
   * @internal The worker closed under us: whoever waits on the endpoint (a handshake, a close
   * handler) is told so with ERR_UCX_CLOSED rather than a clean close it could take for the peer's.
   */
  abandon(): void {
    this.failure ??= new LaminarError(ErrorCodes.UCX_CLOSED, `the UCX worker was closed (endpoint to ${this.peer})`);
    this.finish(this.failure);
  }

  private finish(error: LaminarError | undefined): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.forget(this.id);
    const handlers = this.closeHandlers;
    this.closeHandlers = [];
    for (const handler of handlers) {
      // finish() runs in a promise reaction or in the worker's close: an exception let out here
      // would be an unhandled rejection, and would keep the remaining handlers from running.
      try {
        handler(error);
      } catch (err) {
        this.handlerFailed(this, err);
      }
    }
  }
}
