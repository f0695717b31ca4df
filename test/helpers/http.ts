/**
 * HTTP clients for tests of the daemons' endpoints: raw bytes on a socket (for what Node's client
 * will not send: malformed request lines, huge headers, slow-loris drips) and plain requests on
 * a fresh connection each.
 */
import { request, type IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';

export interface Answer {
  status: number | null;
  headers: Record<string, string>;
  body: Buffer;
  /** The server closed the connection after (or instead of) answering. */
  closed: boolean;
}

/**
 * Sends raw bytes and reads one answer: resolves once a whole answer (by its Content-Length)
 * arrived, or when the server closes the connection (with whatever arrived: nothing for a
 * connection the server dropped). `untilClose`: only once the server closed the connection.
 * `keepOpen`: the connection is left open after the answer (else the client closes it).
 * `writeAfter`: the bytes are sent once it settles (the connection is made at once).
 */
export function raw(
  port: number,
  bytes: string | Buffer,
  options: { onSocket?: (socket: Socket) => void; keepOpen?: boolean; untilClose?: boolean; writeAfter?: Promise<void> } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let data = Buffer.alloc(0);
    let settled = false;
    const parse = (closed: boolean): Answer | null => {
      const end = data.indexOf('\r\n\r\n');
      if (end < 0) return closed ? { status: null, headers: {}, body: Buffer.alloc(0), closed } : null;
      const [statusLine, ...lines] = data.subarray(0, end).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      const body = data.subarray(end + 4);
      const length = Number(headers['content-length'] ?? 0);
      if (!closed && body.length < length) return null;
      return { status: Number(statusLine!.split(' ')[1]), headers, body: body.subarray(0, length), closed };
    };
    const settle = (closed: boolean): void => {
      const answer = parse(closed);
      if (answer === null || settled) return;
      settled = true;
      if (!closed && options.keepOpen !== true) socket.destroy();
      resolve(answer);
    };
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      if (options.untilClose !== true) settle(false);
    });
    socket.on('close', () => settle(true));
    socket.on('error', (err: NodeJS.ErrnoException) => {
      // A reset after the answer arrived (the server closed with our bytes unread) is a close.
      if (err.code === 'ECONNRESET' || err.code === 'EPIPE') settle(true);
      else if (!settled) reject(err);
    });
    socket.on('connect', () => {
      options.onSocket?.(socket);
      if (options.writeAfter === undefined) socket.write(bytes);
      else void options.writeAfter.then(() => socket.destroyed || socket.write(bytes));
    });
  });
}

/** One request with Node's client (a fresh connection each). */
/** An answer read by Node's client: its headers as Node gives them. */
export type HttpAnswer = Omit<Answer, 'headers'> & { headers: IncomingHttpHeaders };

export function get(port: number, path: string, options: { method?: string; headers?: Record<string, string> } = {}): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: options.method ?? 'GET', headers: options.headers ?? {}, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? null, headers: res.headers, body: Buffer.concat(chunks), closed: false }));
    });
    req.on('error', reject);
    req.end();
  });
}

export const json = (answer: Pick<Answer, 'body'>): { code: string; message: string } =>
  JSON.parse(answer.body.toString('utf8')) as { code: string; message: string };
