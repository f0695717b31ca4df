/**
 * A client connection to a relay's socket: request/response matching by id, event delivery,
 * and failure of everything pending when the socket goes away.
 */
import { createConnection, type Socket } from 'node:net';
import { ClosedError, ErrorCodes, LaminarError, TimeoutError, ProtocolError } from '../../common/errors.js';
import type { ErrorBody } from '../../common/request-protocol/envelope.js';
import { FrameDecoder, decodePayload, encodeFrame, DEFAULT_MAX_FRAME_BYTES } from '../../common/request-protocol/frame.js';
import type { ProgressEvent, VersionEvent } from '../protocol/messages.js';

interface Pending {
  resolve(result: unknown): void;
  reject(err: Error): void;
  onProgress: ((done: number, total: number) => void) | undefined;
}

export interface RequestOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  onProgress?: (done: number, total: number) => void;
}

/** The error a relay returned, rebuilt on the client side with the same code. */
export class RelayError extends LaminarError {}

export class FrameConnection {
  private readonly decoder: FrameDecoder;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closedError: Error | null = null;
  onVersionEvent: ((event: VersionEvent) => void) | null = null;
  private readonly closeListeners = new Set<(err: Error) => void>();

  private constructor(
    private readonly socket: Socket,
    maxFrameBytes: number,
  ) {
    this.decoder = new FrameDecoder(maxFrameBytes);
    socket.on('data', (chunk) => this.onData(chunk));
    socket.on('error', (err) => this.fail(new ClosedError(`relay connection failed: ${err.message}`)));
    socket.on('close', () => this.fail(new ClosedError('the relay closed the connection')));
  }

  static connect(path: string, maxFrameBytes = DEFAULT_MAX_FRAME_BYTES): Promise<FrameConnection> {
    return new Promise((resolve, reject) => {
      const socket = createConnection(path);
      const onError = (err: NodeJS.ErrnoException): void => {
        reject(new ClosedError(`cannot connect to the relay at ${path}: ${err.code ?? err.message} (is \`laminar relay\` running?)`));
      };
      socket.once('error', onError);
      socket.once('connect', () => {
        socket.off('error', onError);
        resolve(new FrameConnection(socket, maxFrameBytes));
      });
    });
  }

  get closed(): boolean {
    return this.closedError !== null;
  }

  /** Calls fn once when the connection ends (at once if it already has); returns an unsubscribe. */
  onClosed(fn: (err: Error) => void): () => void {
    if (this.closedError) {
      fn(this.closedError);
      return () => undefined;
    }
    this.closeListeners.add(fn);
    return () => this.closeListeners.delete(fn);
  }

  request<T>(op: string, args: Record<string, unknown>, options: RequestOptions = {}): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        if (timer) clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        this.pending.delete(id);
      };
      const onAbort = (): void => {
        done();
        reject(new LaminarError(ErrorCodes.ABORTED, `${op} aborted`, { cause: options.signal?.reason }));
      };
      if (options.signal?.aborted) {
        onAbort();
        return;
      }
      options.signal?.addEventListener('abort', onAbort, { once: true });
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          done();
          reject(new TimeoutError(`relay did not answer ${op} within ${options.timeoutMs} ms`));
        }, options.timeoutMs);
      }
      this.pending.set(id, {
        resolve: (r) => {
          done();
          resolve(r as T);
        },
        reject: (e) => {
          done();
          reject(e);
        },
        onProgress: options.onProgress,
      });
      this.socket.write(encodeFrame({ id, op, ...args }));
    });
  }

  private onData(chunk: Buffer): void {
    let payloads: Buffer[];
    try {
      payloads = this.decoder.push(chunk);
    } catch (err) {
      this.fail(err as Error);
      this.socket.destroy();
      return;
    }
    for (const payload of payloads) {
      let message: Record<string, unknown>;
      try {
        message = decodePayload(payload) as Record<string, unknown>;
      } catch (err) {
        this.fail(err as Error);
        this.socket.destroy();
        return;
      }
      this.dispatch(message);
    }
  }

  private dispatch(message: Record<string, unknown>): void {
    if (message.event === 'version') {
      this.onVersionEvent?.(message as unknown as VersionEvent);
      return;
    }
    if (message.event === 'progress') {
      const p = message as unknown as ProgressEvent;
      this.pending.get(p.id)?.onProgress?.(p.done, p.total);
      return;
    }
    const id = message.id;
    if (typeof id !== 'number') {
      // An error about the connection as a whole (bad frame, handshake): fail everything.
      const body = message.error as ErrorBody | undefined;
      this.fail(
        body ? new RelayError(body.code, body.message, { details: body.details }) : new ProtocolError(ErrorCodes.BAD_FRAME, 'unexpected message from relay'),
      );
      return;
    }
    const p = this.pending.get(id);
    if (!p) return;
    if (message.ok === true) p.resolve(message.result);
    else {
      const body = message.error as ErrorBody;
      p.reject(new RelayError(body.code, body.message, { details: body.details }));
    }
  }

  private fail(err: Error): void {
    if (this.closedError) return;
    this.closedError = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const fn of this.closeListeners) fn(err);
    this.closeListeners.clear();
  }

  close(): void {
    this.fail(new ClosedError('connection closed by the client'));
    this.socket.end();
    this.socket.destroy();
  }
}
