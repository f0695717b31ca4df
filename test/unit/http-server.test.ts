/**
 * The HTTP router every daemon serves /metrics (and the manager /status) on, in-process on a
 * real socket: exact routes, errors as `{code, message}` JSON, bad requests of every kind
 * answered while the server goes on, the connection limit, slow-loris headers ended by
 * headersTimeout, HEAD, ETag/304, gzip, and held streams (the dashboard's server-sent events)
 * that requestTimeout does not cut and close() ends. Timeouts are shortened by the server's
 * limits; each test waits on what the socket sees (an answer, a close), not on elapsed time.
 */
import { request, type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { LaminarError } from '../../src/common/errors.js';
import { acceptsGzip, etagMatches, fixedBody, sendBody, sendFixed } from '../../src/common/http-answers.js';
import { hostOfHeader, isAllowedHost } from '../../src/common/http-host.js';
import { httpLimits, startHttpServer, type HeldStream, type HttpLimits, type HttpRoute, type HttpServer } from '../../src/common/http-server.js';
import { serveMetrics, type MetricsServer } from '../../src/common/metrics.js';
import { get, json, raw } from '../helpers/http.js';

/** Reads a counter's value from Prometheus text (0 when absent). */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

const PAGE = fixedBody('<!doctype html><title>laminar</title>' + '<p>rollouts</p>'.repeat(200), 'text/html; charset=utf-8');

/** The routes of the tests: a plain answer, one echoing its query, failures, a fixed page, a stream. */
function testRoutes(streams: HeldStream[]): HttpRoute[] {
  return [
    { path: '/ping', handle: ({ res }) => sendBody(res, 200, { 'content-type': 'text/plain; charset=utf-8' }, 'pong\n') },
    {
      path: '/echo',
      query: ['a', 'b'],
      handle: ({ res, query }) => sendBody(res, 200, { 'content-type': 'application/json' }, JSON.stringify(Object.fromEntries(query))),
    },
    {
      path: '/invalid',
      handle: () => {
        throw new LaminarError(ErrorCodes.INVALID_ARG, 'kind: "x" is not one of relay, rollout, trainer');
      },
    },
    {
      path: '/broken',
      handle: () => Promise.reject(new Error('a bug in a route')),
    },
    { path: '/', label: 'page', forBrowsers: true, handle: ({ req, res }) => sendFixed(req, res, PAGE) },
    {
      path: '/events',
      handle: (exchange) => {
        const stream = exchange.stream({ 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
        if (stream) {
          stream.write('retry: 2000\n\n');
          streams.push(stream);
        }
      },
    },
  ];
}

describe('the HTTP router', () => {
  let registry: Registry;
  let server: HttpServer | MetricsServer | null = null;
  let streams: HeldStream[];

  async function start(limits: Partial<HttpLimits> = {}): Promise<number> {
    registry = new Registry();
    streams = [];
    server = await serveMetrics(registry, { host: '127.0.0.1', port: 0, status: () => ({ up: true }), routes: testRoutes(streams), limits });
    return server.port;
  }
  const metrics = async (port: number): Promise<string> => (await get(port, '/metrics')).body.toString('utf8');

  afterEach(async () => {
    await server?.close();
    server = null;
  });

  it('matches paths exactly: anything else is a 404 in JSON, with the path cut short', async () => {
    const port = await start();
    const ok = await get(port, '/ping');
    expect(ok.status).toBe(200);
    expect(ok.body.toString()).toBe('pong\n');
    expect(ok.headers['x-content-type-options']).toBe('nosniff');
    for (const path of ['/ping/', '/pingx', '/PING', '/metrics/', '/metricsX', '/status/x', '/%70ing', '//ping']) {
      const answer = await get(port, path);
      expect(answer.status, path).toBe(404);
      expect(answer.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(answer.headers['x-content-type-options']).toBe('nosniff');
      expect(json(answer).code).toBe(ErrorCodes.HTTP_NOT_FOUND);
    }
    const long = await get(port, `/${'<script>'.repeat(200)}`);
    expect(long.status).toBe(404);
    expect(json(long).message.length).toBeLessThan(260);
    // Unknown paths all count under one label, whatever clients send.
    for (let i = 0; i < 20; i++) await get(port, `/random-${i}`);
    const text = await metrics(port);
    expect(sample(text, 'laminar_http_requests_total{route="other",status="404"}')).toBe(29);
    expect(text).not.toContain('random-');
    expect(sample(text, 'laminar_http_requests_total{route="/ping",status="200"}')).toBe(1);
  });

  it('answers other methods 405 with Allow, closes, and never reads the body', async () => {
    const port = await start();
    const post = await get(port, '/ping', { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
    expect(json(post).code).toBe(ErrorCodes.HTTP_METHOD);
    expect((await get(port, '/nowhere', { method: 'DELETE' })).status).toBe(405);
    // A body announced as 1 GB, 10 bytes of it sent: the answer comes at once and the connection closes.
    const big = await raw(port, 'POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n\r\n0123456789', { untilClose: true });
    expect(big.status).toBe(405);
    expect(big.headers.connection).toBe('close');
    expect(big.closed).toBe(true);
    const expecting = await raw(port, 'PUT /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n');
    expect(expecting.status).toBe(405); // not 100 Continue first
    expect((await get(port, '/ping')).status).toBe(200);
  });

  it('refuses a request target over 2 KiB with 414', async () => {
    const port = await start();
    const answer = await get(port, `/echo?a=${'x'.repeat(3000)}`);
    expect(answer.status).toBe(414);
    expect(json(answer).code).toBe(ErrorCodes.HTTP_BAD_REQUEST);
    expect((await get(port, `/echo?a=${'x'.repeat(2000)}`)).status).toBe(200);
  });

  it('takes only the query parameters a route names, each once; values as URLSearchParams reads them', async () => {
    const port = await start();
    expect(JSON.parse((await get(port, '/echo?a=1&b=two%20words')).body.toString())).toEqual({ a: '1', b: 'two words' });
    // A bad %-escape stays literal: the route's own check refuses it (here it is echoed back).
    expect(JSON.parse((await get(port, '/echo?a=%zz&b=%')).body.toString())).toEqual({ a: '%zz', b: '%' });
    for (const query of ['c=1', 'a=1&a=2', 'a=1&A=2', '=x', 'a=1&b=2&b=2']) {
      const answer = await get(port, `/echo?${query}`);
      expect(answer.status, query).toBe(400);
      expect(json(answer).code, query).toBe(ErrorCodes.HTTP_BAD_QUERY);
    }
    expect(json(await get(port, '/echo?a=1&a=2')).message).toMatch(/more than once/);
    const none = await get(port, '/ping?x=1');
    expect(none.status).toBe(400);
    expect(json(none).message).toMatch(/takes no query parameters/);
    const metricsQuery = await get(port, '/metrics?name=laminar_http_requests_total');
    expect(json(metricsQuery).code).toBe(ErrorCodes.HTTP_BAD_QUERY);
  });

  it("answers a route's bad input 400 and its failure 500, and goes on", async () => {
    const port = await start();
    const invalid = await get(port, '/invalid');
    expect(invalid.status).toBe(400);
    expect(json(invalid)).toEqual({ code: ErrorCodes.INVALID_ARG, message: 'kind: "x" is not one of relay, rollout, trainer' });
    const broken = await get(port, '/broken');
    expect(broken.status).toBe(500);
    expect(json(broken)).toEqual({ code: ErrorCodes.INTERNAL, message: 'a bug in a route' });
    expect((await get(port, '/ping')).status).toBe(200);
  });

  it('answers what the parser refuses (431, malformed request line or header, no Host) and closes', async () => {
    const port = await start();
    const huge = await raw(port, `GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, { untilClose: true });
    expect(huge.status).toBe(431);
    expect(huge.closed).toBe(true);
    expect(huge.headers['x-content-type-options']).toBe('nosniff');
    expect(json(huge).code).toBe(ErrorCodes.HTTP_BAD_REQUEST);
    // A target beyond the header limit is refused by the parser too.
    expect((await raw(port, `GET /echo?a=${'x'.repeat(20_000)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)).status).toBe(431);
    for (const bad of [
      'GARBAGE\r\n\r\n',
      'GET /ping HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n',
      'GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nNo colon here\r\n\r\n',
      'GET /pi ng HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n',
      '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03', // a TLS ClientHello
    ]) {
      const answer = await raw(port, bad, { untilClose: true });
      expect(answer.status, JSON.stringify(bad)).toBe(400);
      expect(answer.closed).toBe(true);
      expect(json(answer).code).toBe(ErrorCodes.HTTP_BAD_REQUEST);
    }
    // A bad request after a good one on a kept-alive connection: the good one answered, then the error.
    let kept: Socket | undefined;
    expect((await raw(port, 'GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', { keepOpen: true, onSocket: (s) => (kept = s) })).status).toBe(200);
    const second = await new Promise<string>((resolve) => {
      let text = '';
      kept!.on('data', (chunk: Buffer) => (text += chunk.toString()));
      kept!.on('close', () => resolve(text));
      kept!.write('GARBAGE\r\n\r\n');
    });
    expect(second).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    const noHost = await raw(port, 'GET /ping HTTP/1.1\r\n\r\n');
    expect(noHost.status).toBe(400);
    expect(json(noHost).message).toMatch(/Host/);
    // HTTP/1.0 needs no Host.
    expect((await raw(port, 'GET /ping HTTP/1.0\r\n\r\n')).status).toBe(200);
    // An absolute or asterisk target is not a path.
    expect((await raw(port, 'GET http://127.0.0.1/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')).status).toBe(400);
    const text = await metrics(port);
    expect(sample(text, 'laminar_http_requests_total{route="other",status="431"}')).toBe(2);
    // The five the parser refused, the one after a good request and the absolute target; the request without Host named /ping.
    expect(sample(text, 'laminar_http_requests_total{route="other",status="400"}')).toBe(7);
    expect(sample(text, 'laminar_http_requests_total{route="/ping",status="400"}')).toBe(1);
  });

  it('serves a page for browsers only to an IP address, localhost or the served name in Host (421 otherwise); machine routes to any name', async () => {
    const port = await start();
    for (const host of [`127.0.0.1:${port}`, '127.0.0.1', `localhost:${port}`, 'LOCALHOST.', `[::1]:${port}`, '10.0.0.5:9480']) {
      expect((await get(port, '/', { headers: { host } })).status, host).toBe(200);
    }
    for (const host of [`evil.example:${port}`, 'rebind.127.0.0.1.nip.io', 'localhost.evil.example', `127.0.0.1:${port}x`, '[::1']) {
      const answer = await get(port, '/', { headers: { host } });
      expect(answer.status, host).toBe(421);
      expect(json(answer).code).toBe(ErrorCodes.HTTP_HOST);
    }
    // Prometheus scrapes by the name the cluster gives a daemon.
    for (const path of ['/ping', '/metrics']) expect((await get(port, path, { headers: { host: `relay-17.cluster:${port}` } })).status, path).toBe(200);
    expect(isAllowedHost('node7.cluster:9480', 'node7.cluster')).toBe(true);
    expect(isAllowedHost('Node7.Cluster.', 'node7.cluster')).toBe(true);
    expect(isAllowedHost('node8.cluster:9480', 'node7.cluster')).toBe(false);
    expect(isAllowedHost(undefined, '0.0.0.0')).toBe(true);
    expect(isAllowedHost('', '0.0.0.0')).toBe(false);
    expect(hostOfHeader('[fe80::1]:80')).toBe('fe80::1');
    expect(hostOfHeader('a:b')).toBeNull();
  });

  it('answers HEAD with the headers of GET and no body', async () => {
    const port = await start();
    for (const path of ['/ping', '/status', '/metrics', '/']) {
      const full = await get(port, path);
      const head = await raw(port, `HEAD ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      expect(head.status, path).toBe(200);
      expect(head.body.length).toBe(0);
      expect(head.headers['content-type']).toBe(full.headers['content-type']);
      if (path !== '/metrics') expect(head.headers['content-length']).toBe(full.headers['content-length']); // the metrics change between two scrapes
    }
    const headStream = await raw(port, 'HEAD /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', { untilClose: true });
    expect(headStream.headers['content-type']).toBe('text/event-stream');
    expect(headStream.closed).toBe(true);
  });

  it('sends a fixed body with its ETag (304 when the client has it) and gzipped when accepted', async () => {
    const port = await start();
    const plain = await get(port, '/');
    expect(plain.status).toBe(200);
    expect(plain.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(plain.headers['cache-control']).toBe('no-cache');
    expect(plain.headers.vary).toBe('Accept-Encoding');
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.body.equals(PAGE.body)).toBe(true);
    const etag = plain.headers.etag!;
    expect(etag).toMatch(/^"[0-9a-f]{32}"$/);
    const gz = await get(port, '/', { headers: { 'accept-encoding': 'br, gzip;q=0.8' } });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(Number(gz.headers['content-length'])).toBeLessThan(PAGE.body.length / 5);
    expect(gunzipSync(gz.body).equals(PAGE.body)).toBe(true);
    expect((await get(port, '/', { headers: { 'accept-encoding': 'gzip;q=0' } })).headers['content-encoding']).toBeUndefined();
    for (const header of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
      const cached = await get(port, '/', { headers: { 'if-none-match': header } });
      expect(cached.status, header).toBe(304);
      expect(cached.body.length).toBe(0);
      expect(cached.headers.etag).toBe(etag);
    }
    expect((await get(port, '/', { headers: { 'if-none-match': '"stale"' } })).status).toBe(200);
    expect(acceptsGzip('GZIP')).toBe(true);
    expect(acceptsGzip('identity')).toBe(false);
    expect(etagMatches(undefined, etag)).toBe(false);
    // A body gzip does not shrink is sent as it is.
    expect(fixedBody('x', 'text/plain').gzipped).toBeNull();
  });

  it('sends each content type: Prometheus text, JSON status, JSON errors', async () => {
    const port = await start();
    const scrape = await get(port, '/metrics');
    expect(scrape.headers['content-type']).toBe(registry.contentType);
    expect(scrape.body.toString()).toContain('# TYPE laminar_http_requests_total counter');
    expect(scrape.body.toString()).toContain('# TYPE laminar_http_dropped_connections_total counter');
    const status = await get(port, '/status');
    expect(status.headers['content-type']).toBe('application/json');
    expect(JSON.parse(status.body.toString())).toEqual({ up: true });
  });

  it('drops connections over maxConnections at once, counts them, and serves again afterwards', async () => {
    // Keep-alive longer than the test: an accepted connection stays open until the test closes it.
    const port = await start({ keepAliveTimeoutMs: 120_000, headersTimeoutMs: 60_000, requestTimeoutMs: 60_000 });
    const sockets: Socket[] = [];
    // 600 at once: each either gets its answer (accepted, then held open) or is closed unanswered (dropped).
    const answers = await Promise.all(
      Array.from({ length: 600 }, () =>
        raw(port, 'GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', { keepOpen: true, onSocket: (socket) => sockets.push(socket) }).catch(() => null),
      ),
    );
    const answered = answers.filter((a) => a !== null && a.status === 200).length;
    const unanswered = answers.filter((a) => a === null || a.status === null).length;
    expect(answered).toBe(256);
    expect(unanswered).toBe(600 - 256);
    for (const s of sockets) s.destroy();
    // Once the held connections are closed (the server sees it a moment later), it serves again;
    // an attempt that comes before is dropped like the others.
    let after: number | null = null;
    let droppedAfter = 0;
    const deadline = Date.now() + 20_000;
    while (after !== 200 && Date.now() < deadline) {
      after = (await get(port, '/ping').catch(() => null))?.status ?? null;
      if (after === null) droppedAfter += 1;
    }
    expect(after).toBe(200);
    const text = await metrics(port);
    expect(sample(text, 'laminar_http_dropped_connections_total')).toBe(unanswered + droppedAfter);
    expect(sample(text, 'laminar_http_requests_total{route="/ping",status="200"}')).toBe(257);
  });

  it('ends a slow-loris request at headersTimeout with 408, and the server goes on', async () => {
    const port = await start({ headersTimeoutMs: 300, requestTimeoutMs: 300 });
    let drip: NodeJS.Timeout | undefined;
    // One header line every 50 ms, never the blank line that ends them.
    const answer = await raw(port, 'GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n', {
      untilClose: true,
      onSocket: (socket) => (drip = setInterval(() => socket.write(`X-Drip-${Date.now()}: 1\r\n`), 50)),
    });
    clearInterval(drip);
    expect(answer.status).toBe(408);
    expect(answer.closed).toBe(true);
    expect(json(answer).code).toBe(ErrorCodes.TIMEOUT);
    // A connection that sends nothing at all is ended the same way.
    const silent = await raw(port, '', { untilClose: true });
    expect(silent.status).toBe(408);
    expect(silent.closed).toBe(true);
    expect((await get(port, '/ping')).status).toBe(200);
    expect(sample(await metrics(port), 'laminar_http_requests_total{route="other",status="408"}')).toBe(2);
  });

  it('keeps a held stream open beyond requestTimeout, and close() ends it before the server closes', async () => {
    const port = await start({ headersTimeoutMs: 300, requestTimeoutMs: 300 });
    const received: string[] = [];
    const ended = new Promise<IncomingHttpHeaders>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/events', agent: false }, (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => received.push(chunk));
        res.on('end', () => resolve(res.headers));
      });
      req.on('error', reject);
      req.end();
    });
    const waitFor = (text: string): Promise<void> =>
      new Promise((resolve) => {
        const check = (): void => (received.join('').includes(text) ? resolve() : void setImmediate(check));
        check();
      });
    await waitFor('retry: 2000');
    // A slow-loris request opened after the stream is ended by the timeouts: the stream is now
    // older than requestTimeout, and still open.
    expect((await raw(port, 'GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n')).status).toBe(408);
    expect(streams).toHaveLength(1);
    const stream = streams[0]!;
    expect(stream.closed).toBe(false);
    expect(stream.write('event: delta\ndata: {}\n\n')).toBe(true);
    await waitFor('event: delta');
    let closedSeen = false;
    stream.onClose(() => (closedSeen = true));
    await server!.close();
    server = null;
    const headers = await ended;
    expect(headers['content-type']).toBe('text/event-stream');
    expect(headers.connection).toBe('close');
    expect(closedSeen).toBe(true);
    expect(stream.closed).toBe(true);
    expect(stream.write('late')).toBe(false);
  });

  it('refuses bad limits and route tables', async () => {
    expect(httpLimits()).toMatchObject({ maxConnections: 256, headersTimeoutMs: 10_000, requestTimeoutMs: 15_000, keepAliveTimeoutMs: 5_000 });
    expect(() => httpLimits({ headersTimeoutMs: 20_000 })).toThrow(/beyond requestTimeoutMs/);
    expect(() => httpLimits({ maxConnections: 0 })).toThrow(/maxConnections/);
    const base = { host: '127.0.0.1', port: 0, registry: new Registry() };
    const ping = testRoutes([])[0]!;
    await expect(startHttpServer({ ...base, routes: [ping, ping] })).rejects.toMatchObject({ code: ErrorCodes.INVALID_ARG });
    await expect(startHttpServer({ ...base, routes: [{ ...ping, path: 'ping' }] })).rejects.toMatchObject({ code: ErrorCodes.INVALID_ARG });
  });
});
