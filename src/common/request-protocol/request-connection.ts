/**
 * The server side of one connection speaking the request protocol: frames (frame.ts) carrying
 * requests `{ id, op, ...args }` (envelope.ts), answered by `{ id, ok: true, result }`
 * or `{ id, ok: false, error }`. The relay's local API (src/relay/server.ts) and the sampler service
 * (src/data/sampler-service/server.ts) both speak it: a subclass brings its operations (a zod
 * schema each), what hello answers, what the other operations do, and its metrics; decoding,
 * validation, the handshake, error responses and the output limit live here once.
 *
 * A malformed frame, a message that is no request, or a first request other than hello closes
 * the connection after an error frame saying why: its byte stream cannot be trusted any more.
 * A request that is well framed but invalid gets an error response and the connection stays.
 */
import type { Socket } from 'node:net';
import type { z } from 'zod';
import type { Logger } from '../logger.js';
import { ErrorCodes, ProtocolError, toLaminarError, type LaminarError } from '../errors.js';
import { envelopeSchema } from './envelope.js';
import { FrameDecoder, decodePayload, encodeFrame } from './frame.js';

/** A connection whose unsent output passes this is not reading: it is closed. */
const MAX_PENDING_OUTPUT = 64 * 1024 * 1024;

/** Every protocol's first request: the protocol version the client speaks, and who it is (for the logs). */
export interface HelloRequest {
  protocol: number;
  client?: string | undefined;
}

export interface RequestConnectionSettings<O extends string> {
  /** The request schema of every operation; hello's yields a HelloRequest. */
  schemas: Readonly<Record<O, z.ZodType>> & { readonly hello: z.ZodType<HelloRequest> };
  /** The protocol version hello must ask for. */
  protocol: number;
  /** Who refuses another version, in its error: `${speaker} speaks protocol 1, client asked for 2`. */
  speaker: string;
  maxFrameBytes: number;
  /** The server's logger; the connection logs through a child naming it. */
  logger: Logger;
}

export abstract class RequestConnection<O extends string> {
  protected readonly log: Logger;
  /**
   * Set once the connection is ending (closed by us, or its socket gone: subclasses set it when
   * they clean up). Requests still arriving are ignored, and an operation that waited checks it
   * before it hands the client anything the client could no longer give back.
   */
  protected closing = false;
  private greeted = false;
  private readonly decoder: FrameDecoder;

  constructor(
    readonly id: number,
    readonly socket: Socket,
    private readonly settings: RequestConnectionSettings<O>,
  ) {
    this.decoder = new FrameDecoder(settings.maxFrameBytes);
    this.log = settings.logger.child({ connection: id });
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err) => this.log.debug({ err }, 'client socket error'));
  }

  /** What hello answers, once the client's protocol version matched. */
  protected abstract welcome(): unknown;

  /** Carries out a valid request (`request` passed its operation's schema); `id` is the request's, for events about it. */
  protected abstract dispatch(op: Exclude<O, 'hello'>, request: unknown, id: number): Promise<unknown>;

  /** Counts a request answered with an error; `op` is undefined when it names no operation of the protocol. */
  protected abstract countError(op: O | undefined, code: string): void;

  /** Counts a connection closed because its byte stream cannot be trusted (fatal()). */
  protected abstract countFatal(code: string): void;

  /** Counts a request answered with its result (where a server counts those). */
  protected countAnswered?(op: O): void;

  /**
   * A result that never reached the client (the socket was gone, or it was too large for a
   * frame): whatever it handed over goes back, as the client cannot know of it.
   */
  protected unsent?(op: O, result: unknown): void;

  private onData(chunk: Buffer): void {
    if (this.closing) return;
    let payloads: Buffer[];
    try {
      payloads = this.decoder.push(chunk);
    } catch (err) {
      this.fatal(toLaminarError(err));
      return;
    }
    for (const payload of payloads) {
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- handle() below runs up to its first await and may close the connection; TS keeps the narrowing from the check above across those calls
      if (this.closing) return;
      let message: unknown;
      try {
        message = decodePayload(payload);
      } catch (err) {
        this.fatal(toLaminarError(err));
        return;
      }
      const envelope = envelopeSchema.safeParse(message);
      if (!envelope.success) {
        this.fatal(new ProtocolError(ErrorCodes.BAD_FRAME, 'a request must be a map with an integer id and a string op'));
        return;
      }
      const { id, op } = envelope.data;
      if (!this.greeted && op !== 'hello') {
        this.fatal(new ProtocolError(ErrorCodes.HANDSHAKE_REQUIRED, `the first request must be hello, got ${JSON.stringify(op)}`));
        return;
      }
      void this.handle(id, op, message as Record<string, unknown>);
    }
  }

  private async handle(id: number, op: string, message: Record<string, unknown>): Promise<void> {
    const known = Object.hasOwn(this.settings.schemas, op) ? (op as O) : undefined;
    try {
      if (known === undefined) throw new ProtocolError(ErrorCodes.UNKNOWN_OP, `unknown operation ${JSON.stringify(op)}`);
      const parsed = this.settings.schemas[known].safeParse(message);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new ProtocolError(ErrorCodes.BAD_REQUEST, `bad ${op} request: ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'invalid'}`);
      }
      // hello is answered without waiting, so that a request sent right behind it (in the same
      // chunk) already finds the connection greeted.
      const result = await (known === 'hello' ? this.hello(parsed.data as HelloRequest) : this.dispatch(known as Exclude<O, 'hello'>, parsed.data, id));
      this.countAnswered?.(known);
      if (!this.send({ id, ok: true, result: result ?? null })) this.unsent?.(known, result);
    } catch (err) {
      const e = toLaminarError(err);
      this.countError(known, e.code);
      if (e.code === ErrorCodes.INTERNAL) this.log.error({ err }, `${op} failed`);
      else this.log.debug({ code: e.code, op }, e.message);
      this.send({ id, ok: false, error: e.toJSON() });
      // A client of another protocol version cannot go on: it is told why, then the connection ends.
      if (e.code === ErrorCodes.PROTOCOL_VERSION) this.close();
    }
  }

  private hello(request: HelloRequest): unknown {
    const { protocol, speaker } = this.settings;
    if (request.protocol !== protocol) {
      throw new ProtocolError(ErrorCodes.PROTOCOL_VERSION, `${speaker} speaks protocol ${protocol}, client asked for ${request.protocol}`);
    }
    this.greeted = true;
    if (request.client) this.log.debug({ client: request.client }, 'client connected');
    return this.welcome();
  }

  /** Sends a message; false when it could not go (the socket is gone, or it is too large for a frame). */
  protected send(message: unknown): boolean {
    if (this.socket.destroyed) return false;
    let sent = true;
    try {
      this.socket.write(encodeFrame(message, this.settings.maxFrameBytes));
    } catch (err) {
      // A response too large for a frame (a huge tensor list, a huge batch's metadata) becomes an
      // error response to the same request, so that the client's call fails instead of hanging.
      const e = toLaminarError(err);
      const id = (message as { id?: number }).id ?? null;
      this.socket.write(encodeFrame({ id, ok: false, error: e.toJSON() }));
      sent = false;
    }
    if (this.socket.writableLength > MAX_PENDING_OUTPUT) {
      this.log.warn({ pending: this.socket.writableLength }, 'client is not reading its responses: closing');
      this.socket.destroy();
    }
    return sent;
  }

  /** Ends a connection whose byte stream cannot be trusted any more. */
  private fatal(err: LaminarError): void {
    this.countFatal(err.code);
    this.log.warn({ code: err.code }, `closing connection: ${err.message}`);
    this.send({ id: null, ok: false, error: err.toJSON() });
    this.close();
  }

  /** Ends the connection once what was sent is flushed; a client that does not read gets a second. */
  private close(): void {
    this.closing = true;
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }
}
