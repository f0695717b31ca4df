/**
 * How a route of the HTTP router (http-server.ts) answers: a body with its length, JSON, an
 * error as `{code, message}` JSON, and fixed bodies (a page, an asset) sent with an `ETag`
 * (304 when the client has them) and gzipped when the client takes it. A `HEAD` request gets
 * the same status and headers as its `GET`, with no body: Node's response drops the body of a
 * `HEAD` answer by itself, and the `Content-Length` set here is the one the `GET` would carry.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';

export const JSON_TYPE = 'application/json; charset=utf-8';

/** Sends `body` whole with `status` and `headers` (plus its `Content-Length`). */
export function sendBody(res: ServerResponse, status: number, headers: OutgoingHttpHeaders, body: string | Buffer): void {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  res.writeHead(status, { ...headers, 'content-length': bytes.length });
  res.end(bytes);
}

/** Sends `value` as JSON (what `JSON.stringify` makes of it). */
export function sendJson(res: ServerResponse, value: unknown, status = 200, headers: OutgoingHttpHeaders = {}): void {
  sendBody(res, status, { 'content-type': JSON_TYPE, ...headers }, JSON.stringify(value));
}

/** The body of every error answer: a stable code from the catalogue and a message for people. */
export function errorBody(code: string, message: string): string {
  return JSON.stringify({ code, message });
}

/** Answers an error: `{"code": ..., "message": ...}` with `status`. */
export function sendError(res: ServerResponse, status: number, code: string, message: string, headers: OutgoingHttpHeaders = {}): void {
  sendBody(res, status, { 'content-type': JSON_TYPE, ...headers }, errorBody(code, message));
}

/** A body fixed for the life of the process (the page, an asset), ready to send. */
export interface FixedBody {
  readonly contentType: string;
  readonly body: Buffer;
  /** The body gzipped, or null when gzip would not make it smaller. */
  readonly gzipped: Buffer | null;
  /** A strong validator: a hash of the body, quoted. */
  readonly etag: string;
  readonly cacheControl: string;
}

/** Hashes and gzips `body` once, so that each request only picks what to send. */
export function fixedBody(body: string | Buffer, contentType: string, cacheControl = 'no-cache'): FixedBody {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const gzipped = gzipSync(bytes, { level: 9 });
  return {
    contentType,
    body: bytes,
    gzipped: gzipped.length < bytes.length ? gzipped : null,
    etag: `"${createHash('sha256').update(bytes).digest('hex').slice(0, 32)}"`,
    cacheControl,
  };
}

/**
 * Sends a fixed body: 304 without a body when the request's `If-None-Match` names its ETag,
 * else 200 with the body, gzipped when the request accepts gzip.
 */
export function sendFixed(req: IncomingMessage, res: ServerResponse, fixed: FixedBody): void {
  const validators = { etag: fixed.etag, 'cache-control': fixed.cacheControl };
  if (etagMatches(req.headers['if-none-match'], fixed.etag)) {
    res.writeHead(304, validators);
    res.end();
    return;
  }
  const headers: OutgoingHttpHeaders = { ...validators, 'content-type': fixed.contentType };
  if (fixed.gzipped === null) {
    sendBody(res, 200, headers, fixed.body);
    return;
  }
  // Caches must keep the two encodings apart.
  headers.vary = 'Accept-Encoding';
  if (acceptsGzip(req.headers['accept-encoding'])) sendBody(res, 200, { ...headers, 'content-encoding': 'gzip' }, fixed.gzipped);
  else sendBody(res, 200, headers, fixed.body);
}

/** `If-None-Match` (a list of entity tags, or `*`) names `etag`; weak comparison, as RFC 9110 asks for it. */
export function etagMatches(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  const bare = (tag: string): string => (tag.startsWith('W/') ? tag.slice(2) : tag);
  return header
    .split(',')
    .map((t) => t.trim())
    .some((t) => t === '*' || bare(t) === bare(etag));
}

/** `Accept-Encoding` lists gzip (or `*`) without `q=0`. */
export function acceptsGzip(header: string | undefined): boolean {
  if (header === undefined) return false;
  for (const part of header.split(',')) {
    const [name, ...params] = part.split(';').map((s) => s.trim().toLowerCase());
    if (name !== 'gzip' && name !== 'x-gzip' && name !== '*') continue;
    const q = params.find((p) => p.startsWith('q='));
    if (q === undefined || Number(q.slice(2)) > 0) return true;
  }
  return false;
}
