/**
 * The HTTP server every daemon runs (`/metrics`, the manager's `/status` and dashboard): a
 * table of routes matched exactly on the path, GET and HEAD only, and limits, so that a bad or
 * hostile client gets an error and the daemon goes on serving the others.
 *
 * - An unknown path: 404 `ERR_HTTP_NOT_FOUND`; another method: 405 `ERR_HTTP_METHOD` with
 *   `Allow` (the body is never read, the connection closed); a request target over 2 KiB: 414; a
 *   query parameter the route does not take, or one given twice: 400 `ERR_HTTP_BAD_QUERY`; a
 *   `Host` that is not an address, `localhost` or the served name, on a route for browsers: 421
 *   (see http-host.ts).
 * - What Node's parser refuses (a malformed request line or header, headers over 16 KiB) and
 *   requests whose headers do not arrive within `headersTimeout` (slow-loris) are answered by
 *   the `clientError` handler: 400, 431 or 408, then the socket is closed.
 * - At most `maxConnections` connections; Node closes the next ones at once (counted).
 * - Every answer carries `X-Content-Type-Options: nosniff`; every error is `{code, message}` JSON.
 * - A route may hold its response open (the dashboard's server-sent events): `requestTimeout`
 *   only runs until a request has been received, so it never cuts such a stream, and `close()`
 *   ends every held stream before closing the server (which would otherwise wait on them).
 *
 * Counted on the daemon's registry: `laminar_http_requests_total{route,status}` (route: a name
 * from the table, or `other`, so that the labels stay bounded whatever clients send) and
 * `laminar_http_dropped_connections_total`.
 */
import { createServer, STATUS_CODES, type IncomingMessage, type OutgoingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Registry } from 'prom-client';
import { ErrorCodes } from './error-codes.js';
import { LaminarError } from './errors.js';
import { errorBody, JSON_TYPE, sendError } from './http-answers.js';
import { isAllowedHost } from './http-host.js';
import type { Logger } from './logger.js';
import { counter } from './metric-factory.js';

/** The limits of one server; every daemon runs with the defaults, tests with shorter times. */
export interface HttpLimits {
  /** Connections open at once; Node closes any further one as soon as it is accepted. */
  maxConnections: number;
  /** Time from a request's first byte to the end of its headers (slow-loris requests end here). */
  headersTimeoutMs: number;
  /** Time from a request's first byte to the end of its body; a held stream is not subject to it. */
  requestTimeoutMs: number;
  /** How long an idle keep-alive connection stays open. */
  keepAliveTimeoutMs: number;
  /** Longest request target (path and query) served; longer ones get 414. */
  maxTargetLength: number;
  /** Largest request line and headers Node's parser takes; larger ones get 431. */
  maxHeaderBytes: number;
}

export const DEFAULT_HTTP_LIMITS: Readonly<HttpLimits> = Object.freeze({
  maxConnections: 256,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 15_000,
  keepAliveTimeoutMs: 5_000,
  maxTargetLength: 2048,
  maxHeaderBytes: 16 * 1024,
});

/** Longest part of a path quoted back in an error message. */
const QUOTED_PATH = 200;
/** How long a socket answered by the clientError handler may stay half-closed before it is destroyed. */
const CLIENT_ERROR_LINGER_MS = 2000;

/** One request as a route sees it: the path matched, the query checked against the route's parameters. */
export interface HttpExchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly path: string;
  /** The query parameters, each given once and each one the route takes. */
  readonly query: ReadonlyMap<string, string>;
  /** A HEAD request: the answer's body is dropped (Node does it), only its headers go out. */
  readonly head: boolean;
  /**
   * Holds the response open as a stream (server-sent events): sends `status` and `headers` now
   * and returns the stream; null for a HEAD request (headers sent, response ended).
   */
  stream(headers: OutgoingHttpHeaders, status?: number): HeldStream | null;
}

/** A response held open by a route: written to as things happen, ended by either side or by `close()`. */
export interface HeldStream {
  /** Writes a chunk; false when the socket's buffer is above its high-water mark (Node's meaning). */
  write(chunk: string | Buffer): boolean;
  /** Bytes written and not yet handed to the kernel (a client that cannot keep up makes it grow). */
  readonly buffered: number;
  readonly closed: boolean;
  end(): void;
  /** Cuts the connection at once, dropping what is buffered: for a client that does not read (end() would wait on it to flush). */
  destroy(): void;
  /** Runs `listener` once when the stream is over, whoever ended it. */
  onClose(listener: () => void): void;
}

export interface HttpRoute {
  /** The exact path (`/metrics`, not `/metrics/` nor `/metrics?x`). */
  readonly path: string;
  /** The route's value of the `route` label (default: the path). */
  readonly label?: string;
  /** Query parameters the route takes (default: none). */
  readonly query?: readonly string[];
  /**
   * A page for browsers (the dashboard): its `Host` must be an address, `localhost` or the served
   * name, against DNS rebinding (http-host.ts). Machine endpoints (`/metrics`, `/status`) do not
   * check it: Prometheus and scripts reach daemons by whatever DNS name the cluster gives them.
   */
  readonly forBrowsers?: boolean;
  /** Answers the request; a thrown LaminarError with ERR_INVALID_ARG is a 400, anything else a 500. */
  handle(exchange: HttpExchange): void | Promise<void>;
}

export interface HttpServerOptions {
  host: string;
  port: number;
  routes: readonly HttpRoute[];
  /** Where the server's counters go (the daemon's registry). */
  registry: Registry;
  limits?: Partial<HttpLimits>;
  /** Where a route's failure (a 500) is logged. */
  logger?: Logger;
}

export interface HttpServer {
  /** The bound port (the kernel's choice for port 0). */
  readonly port: number;
  /** Ends the held streams, then stops accepting and waits for the requests in flight. */
  close(): Promise<void>;
}

/** Checks limits and fills in the defaults; ERR_INVALID_ARG names the first bad one. */
export function httpLimits(input: Partial<HttpLimits> = {}): HttpLimits {
  const limits = { ...DEFAULT_HTTP_LIMITS, ...input };
  for (const [name, value] of Object.entries(limits)) {
    if (!Number.isSafeInteger(value) || value <= 0) throw new LaminarError(ErrorCodes.INVALID_ARG, `HTTP limit ${name}: ${value} is not a positive integer`);
  }
  // Node refuses a headers timeout beyond the request timeout.
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new LaminarError(
      ErrorCodes.INVALID_ARG,
      `HTTP limits: headersTimeoutMs ${limits.headersTimeoutMs} is beyond requestTimeoutMs ${limits.requestTimeoutMs}`,
    );
  }
  return limits;
}

/** Starts the server on host:port with `routes`; resolves once it listens. */
export async function startHttpServer(options: HttpServerOptions): Promise<HttpServer> {
  const limits = httpLimits(options.limits);
  const routes = new Map<string, HttpRoute>();
  for (const route of options.routes) {
    if (!route.path.startsWith('/')) throw new LaminarError(ErrorCodes.INVALID_ARG, `HTTP route ${JSON.stringify(route.path)} does not start with /`);
    if (routes.has(route.path)) throw new LaminarError(ErrorCodes.INVALID_ARG, `HTTP route ${route.path} is given twice`);
    routes.set(route.path, route);
  }
  const requests = counter(options.registry, {
    name: 'laminar_http_requests_total',
    help: 'HTTP requests answered, by route (other: no route of the table) and status',
    labelNames: ['route', 'status'],
  });
  const dropped = counter(options.registry, {
    name: 'laminar_http_dropped_connections_total',
    help: 'HTTP connections closed as soon as accepted, because the most connections allowed were open',
  });
  const held = new Set<ServerResponse>();
  /** The response each socket is answering, so that the clientError handler never writes into one. */
  const inFlight = new WeakMap<Socket, ServerResponse>();
  /** Sockets the clientError handler already answered (the parser may report the same error again). */
  const answered = new WeakSet<Socket>();

  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    inFlight.set(req.socket, res);
    res.setHeader('x-content-type-options', 'nosniff');
    let label = 'other';
    res.once('close', () => {
      if (inFlight.get(req.socket) === res) inFlight.delete(req.socket);
      // A client gone before its answer started (a scrape given up) got no status to count.
      if (res.headersSent) requests.inc({ route: label, status: String(res.statusCode) });
    });
    const target = req.url ?? '';
    const question = target.indexOf('?');
    const path = question < 0 ? target : target.slice(0, question);
    const route = routes.get(path);
    if (route) label = route.label ?? route.path;
    const refuse = (status: number, code: string, message: string, headers: OutgoingHttpHeaders = {}): void => sendError(res, status, code, message, headers);

    if (req.httpVersion === '1.1' && req.headers.host === undefined) {
      refuse(400, ErrorCodes.HTTP_BAD_REQUEST, 'an HTTP/1.1 request needs a Host header', { connection: 'close' });
      return;
    }
    if (target.length > limits.maxTargetLength) {
      refuse(414, ErrorCodes.HTTP_BAD_REQUEST, `the request target is ${target.length} characters long; at most ${limits.maxTargetLength} are served`, {
        connection: 'close',
      });
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      // The body is never read: the connection closes after this answer.
      refuse(405, ErrorCodes.HTTP_METHOD, `${String(req.method).slice(0, 20)} is not served; only GET and HEAD`, { allow: 'GET, HEAD', connection: 'close' });
      return;
    }
    if (!path.startsWith('/')) {
      refuse(400, ErrorCodes.HTTP_BAD_REQUEST, 'the request target must be a path (origin form)', { connection: 'close' });
      return;
    }
    if (!route) {
      refuse(404, ErrorCodes.HTTP_NOT_FOUND, `no route ${JSON.stringify(path.slice(0, QUOTED_PATH))}`);
      return;
    }
    if (route.forBrowsers && !isAllowedHost(req.headers.host, options.host)) {
      const host = (req.headers.host ?? '').slice(0, QUOTED_PATH);
      refuse(421, ErrorCodes.HTTP_HOST, `Host ${JSON.stringify(host)} is not an IP address, localhost or ${options.host}`, { connection: 'close' });
      return;
    }
    const query = parseQuery(question < 0 ? '' : target.slice(question + 1), route);
    if (typeof query === 'string') {
      refuse(400, ErrorCodes.HTTP_BAD_QUERY, query);
      return;
    }
    const exchange: HttpExchange = {
      req,
      res,
      path,
      query,
      head: req.method === 'HEAD',
      stream: (headers, status = 200) => holdStream(req, res, held, headers, status),
    };
    const failed = (err: unknown): void => {
      const invalid = err instanceof LaminarError && err.code === ErrorCodes.INVALID_ARG;
      if (!invalid) options.logger?.warn({ err, route: label }, 'HTTP route failed');
      if (res.headersSent) res.destroy();
      else if (invalid) refuse(400, err.code, err.message);
      else refuse(500, ErrorCodes.INTERNAL, err instanceof Error ? err.message : String(err));
    };
    try {
      const done = route.handle(exchange);
      if (done instanceof Promise) done.catch(failed);
    } catch (err) {
      failed(err);
    }
  };

  const server: Server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      maxHeaderSize: limits.maxHeaderBytes,
      // Node checks the two timeouts on this period (30 s by default, which would let a
      // slow-loris request hold its connection three times headersTimeout).
      connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
      // Answered by onRequest, as JSON like every other error.
      requireHostHeader: false,
    },
    onRequest,
  );
  server.maxConnections = limits.maxConnections;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.on('drop', () => dropped.inc());
  // A client sending `Expect: 100-continue` (a POST) gets its 405 without a 100 first.
  server.on('checkContinue', onRequest);
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (answered.has(socket)) return;
    answered.add(socket);
    // With an answer still being made on this connection (a request before the bad one), no
    // error answer can be put in front of it: the connection is cut instead.
    if (err.code === 'ECONNRESET' || !socket.writable || inFlight.has(socket)) {
      socket.destroy();
      return;
    }
    const [status, code, message] = clientErrorAnswer(err, limits);
    requests.inc({ route: 'other', status: String(status) });
    const body = errorBody(code, message);
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: ${JSON_TYPE}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `x-content-type-options: nosniff\r\nconnection: close\r\n\r\n${body}`,
    );
    // Half-closed, the client reads the answer and closes; one that does not is cut off.
    setTimeout(() => socket.destroy(), CLIENT_ERROR_LINGER_MS).unref();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const res of [...held]) res.end();
      server.closeIdleConnections();
      await closed;
    },
  };
}

/** The query's parameters, or why they are refused (a parameter the route does not take, or twice). */
function parseQuery(text: string, route: HttpRoute): Map<string, string> | string {
  const query = new Map<string, string>();
  const takes = route.query ?? [];
  // URLSearchParams leaves a bad %-escape as it is: the route's own check then refuses the value.
  for (const [name, value] of new URLSearchParams(text)) {
    const quoted = JSON.stringify(name.slice(0, QUOTED_PATH));
    if (!takes.includes(name)) {
      return takes.length === 0
        ? `${route.path} takes no query parameters (got ${quoted})`
        : `${route.path} takes no query parameter ${quoted} (it takes ${takes.join(', ')})`;
    }
    if (query.has(name)) return `query parameter ${quoted} is given more than once`;
    query.set(name, value);
  }
  return query;
}

/**
 * Node's code for a request past headersTimeout or requestTimeout (a code of Node's, not of our
 * catalogue: joined from parts, as the catalogue test takes every literal with our prefix for one of ours).
 */
const NODE_REQUEST_TIMEOUT = ['ERR', 'HTTP', 'REQUEST', 'TIMEOUT'].join('_');

/** What the clientError handler answers to an error of Node's parser or a request timeout. */
function clientErrorAnswer(err: NodeJS.ErrnoException, limits: HttpLimits): [number, string, string] {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return [431, ErrorCodes.HTTP_BAD_REQUEST, `the request line and headers are over ${limits.maxHeaderBytes} bytes`];
    case NODE_REQUEST_TIMEOUT:
      return [408, ErrorCodes.TIMEOUT, `the request did not arrive within ${limits.headersTimeoutMs} ms (headers) or ${limits.requestTimeoutMs} ms (whole)`];
    default:
      return [400, ErrorCodes.HTTP_BAD_REQUEST, `malformed request (${err.code ?? 'parse error'})`];
  }
}

/**
 * Sends the head of a long-lived response and keeps it in `held` until it is over. It is sent
 * with `Connection: close`: once the stream ends (client gone, the route's end(), `close()`),
 * its connection goes too rather than waiting idle for a next request.
 */
function holdStream(req: IncomingMessage, res: ServerResponse, held: Set<ServerResponse>, headers: OutgoingHttpHeaders, status: number): HeldStream | null {
  res.writeHead(status, { ...headers, connection: 'close' });
  if (req.method === 'HEAD') {
    res.end();
    return null;
  }
  res.flushHeaders();
  held.add(res);
  let closed = false;
  res.once('close', () => {
    closed = true;
    held.delete(res);
  });
  return {
    write: (chunk) => (closed ? false : res.write(chunk)),
    get buffered() {
      return res.writableLength;
    },
    get closed() {
      return closed;
    },
    end: () => {
      if (!closed) res.end();
    },
    destroy: () => {
      if (!closed) res.destroy();
    },
    onClose: (listener) => {
      if (closed) queueMicrotask(listener);
      else res.once('close', listener);
    },
  };
}
