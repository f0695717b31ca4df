/**
 * A server-sent-events client for tests of the dashboard's `/events`: it opens the stream with
 * Node's client, parses the messages as they arrive (`id`, `event`, `data`, `retry` fields; a
 * blank line ends a message) and hands them out in order, waiting on the socket for the next.
 */
import { request, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';

export interface SseMessage {
  event: string;
  id: string | null;
  data: string;
  retry: number | null;
}

export class SseClient {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** Bytes of the stream read so far. */
  bytes = 0;
  private readonly queue: SseMessage[] = [];
  private waiting: (() => void) | null = null;
  private buffer = '';
  private ended = false;

  private constructor(private readonly res: IncomingMessage) {
    this.status = res.statusCode ?? 0;
    this.headers = res.headers;
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      this.bytes += Buffer.byteLength(chunk);
      this.buffer += chunk;
      for (let end = this.buffer.indexOf('\n\n'); end >= 0; end = this.buffer.indexOf('\n\n')) {
        this.queue.push(parse(this.buffer.slice(0, end)));
        this.buffer = this.buffer.slice(end + 2);
      }
      this.wake();
    });
    const over = (): void => {
      this.ended = true;
      this.wake();
    };
    res.on('end', over);
    res.on('close', over);
    res.on('error', over);
  }

  /** Opens `path` on 127.0.0.1:`port`; resolves once the answer's head arrived (any status). */
  static open(port: number, path = '/events', headers: Record<string, string> = {}): Promise<SseClient> {
    return new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, headers: { accept: 'text/event-stream', ...headers }, agent: false }, (res) =>
        resolve(new SseClient(res)),
      );
      req.on('error', reject);
      req.end();
    });
  }

  /** The next message; rejects when the stream ends first, or after `timeoutMs` (which only bounds a failing test). */
  async next(timeoutMs = 30_000): Promise<SseMessage> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const message = this.queue.shift();
      if (message) return message;
      if (this.ended) throw new Error('the event stream ended');
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no event within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiting = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /** The next message, parsed as JSON, checking its event name. */
  async nextJson<T>(event: string, timeoutMs?: number): Promise<T> {
    const message = await this.next(timeoutMs);
    if (message.event !== event) throw new Error(`expected event ${event}, got ${message.event}`);
    return JSON.parse(message.data) as T;
  }

  /** Resolves once the server ended the stream (messages not yet read stay readable). */
  async closed(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.ended) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`the stream did not end within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiting = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  get isEnded(): boolean {
    return this.ended;
  }

  /** Stops reading (the socket's buffers then fill: a page that cannot keep up). */
  pause(): void {
    this.res.pause();
  }

  /** Reads again (a paused response learns that its stream ended only once it reads). */
  resume(): void {
    this.res.resume();
  }

  close(): void {
    this.res.destroy();
  }

  private wake(): void {
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.();
  }
}

function parse(block: string): SseMessage {
  const message: SseMessage = { event: 'message', id: null, data: '', retry: null };
  const data: string[] = [];
  for (const line of block.split('\n')) {
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') message.event = value;
    else if (field === 'id') message.id = value;
    else if (field === 'data') data.push(value);
    else if (field === 'retry') message.retry = Number(value);
  }
  message.data = data.join('\n');
  return message;
}
