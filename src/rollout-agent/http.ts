/**
 * JSON over HTTP to an inference engine, with the errors the agent acts on: ERR_ENGINE_UNAVAILABLE
 * when the engine cannot be reached (it is down or restarting: the agent waits for it),
 * ERR_ENGINE_REQUEST when it answered an error status (the request was wrong or refused).
 */
import http from 'node:http';
import https from 'node:https';
import { ErrorCodes, LaminarError } from '../common/errors.js';
import { SSE_DONE, sseEvents } from './sse.js';

export class EngineError extends LaminarError {}

/** An answer whose body is read as it comes (a `Response` is one; so is enginePost's). */
export interface StreamedAnswer {
  ok: boolean;
  status: number;
  body: AsyncIterable<Uint8Array> | null;
  text(): Promise<string>;
}

export interface HttpOptions {
  method?: 'GET' | 'POST';
  body?: unknown;
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Fetches `url`; a network failure or a timeout is ERR_ENGINE_UNAVAILABLE, an abort by `signal` is rethrown as is. */
export async function engineFetch(url: string, options: HttpOptions = {}): Promise<Response> {
  const timeout = AbortSignal.timeout(options.timeoutMs ?? 30_000);
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
  try {
    return await fetch(url, {
      method: options.method ?? (options.body === undefined ? 'GET' : 'POST'),
      headers: options.body === undefined ? {} : { 'content-type': 'application/json' },
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
      signal,
    });
  } catch (err) {
    if (options.signal?.aborted) throw err;
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    const why = timeout.aborted ? `no answer in ${options.timeoutMs ?? 30_000} ms` : (cause?.code ?? cause?.message ?? (err as Error).message);
    throw new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${shortUrl(url)}: ${why}`, { cause: err, details: { url } });
  }
}

/**
 * Connections kept open between requests (a multi-turn trajectory sends one request per turn).
 * An idle one is closed after IDLE_MS, under the servers' own idle limits (uvicorn's, SGLang's
 * server, closes after 5 s), as fetch's client does (4 s): a request sent on a connection the
 * server is closing meanwhile fails; the one that does all the same is sent again (enginePost).
 * The timeout touches only idle connections: an answer may be silent for any time.
 */
const IDLE_MS = 4_000;
const AGENTS = {
  'http:': new http.Agent({ keepAlive: true, timeout: IDLE_MS }),
  'https:': new https.Agent({ keepAlive: true, timeout: IDLE_MS }),
};

/**
 * POSTs `body` as JSON to `url` and resolves once the answer's headers are in, its body to be
 * read as it streams: what engineFetch does, over node:http with kept-alive connections, for the
 * engine's streamed `/generate` (one per turn of every trajectory): fetch's web streams,
 * combined abort signals and timers cost the caller 3-4 times the CPU of a short streamed
 * request this way (docs/performance/actions.md). The same errors: a network failure or the timeout (over the whole answer) is
 * ERR_ENGINE_UNAVAILABLE, an abort by `signal` is rethrown as the signal's reason, and either
 * cuts the connection, which aborts the request at the engine.
 */
export function enginePost(url: string, options: { body: unknown; timeoutMs?: number; signal?: AbortSignal }): Promise<StreamedAnswer> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(abortReason(signal));
  const timeoutMs = options.timeoutMs ?? 30_000;
  const payload = Buffer.from(JSON.stringify(options.body));
  let target: URL;
  try {
    target = new URL(url);
  } catch (err) {
    return Promise.reject(new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${url}: ${(err as Error).message}`, { cause: err, details: { url } }));
  }
  const transport = target.protocol === 'https:' ? https : http;
  const agent = AGENTS[target.protocol as keyof typeof AGENTS];
  return new Promise<StreamedAnswer>((resolve, reject) => {
    let timedOut = false;
    let answered = false;
    let request: http.ClientRequest;
    const onAbort = (): void => {
      request.destroy(abortReason(signal!));
    };
    // Over the whole answer, as fetch's timeout signal: the connection is cut, a read in progress fails.
    const timer = setTimeout(() => {
      timedOut = true;
      request.destroy(new Error(`no answer in ${timeoutMs} ms`));
    }, timeoutMs);
    timer.unref();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const send = (): void => {
      const sent = transport.request(target, {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': payload.byteLength },
      });
      request = sent;
      sent.on('error', (err) => {
        if (answered) return; // the body's reader sees it
        const code = (err as { code?: string }).code;
        // A kept-alive connection the server closed as the request went out (closing it idle, it
        // does not read what comes): the request goes again on another connection. Each such
        // failure drops its connection, and one made for the request is final: it ends.
        if (sent.reusedSocket && code === 'ECONNRESET' && !timedOut && !signal?.aborted) {
          send();
          return;
        }
        done();
        if (signal?.aborted) reject(abortReason(signal));
        else {
          const why = timedOut ? `no answer in ${timeoutMs} ms` : (code ?? err.message);
          reject(new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${shortUrl(url)}: ${why}`, { cause: err, details: { url } }));
        }
      });
      sent.on('response', (response) => {
        answered = true;
        response.on('close', done);
        const status = response.statusCode ?? 0;
        resolve({
          ok: status >= 200 && status < 300,
          status,
          body: drainedOnReturn(response),
          text: async () => {
            const chunks: Buffer[] = [];
            for await (const chunk of response) chunks.push(chunk as Buffer);
            return Buffer.concat(chunks).toString('utf8');
          },
        });
      });
      sent.end(payload);
    };
    send();
  });
}

/** How long the rest of an answer left unread may take to come before its connection is cut. */
const DRAIN_MS = 5_000;

/**
 * The answer's bytes; a reader that stops early (at the finish event, before `[DONE]` and the
 * end) leaves the rest to be read and dropped rather than the connection cut, so that it serves
 * the next request (a Readable's own iterator destroys the stream, and its socket, on return).
 */
function drainedOnReturn(response: http.IncomingMessage): AsyncIterable<Uint8Array> {
  return {
    async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
      let ended = false;
      try {
        for await (const chunk of response.iterator({ destroyOnReturn: false })) yield chunk as Uint8Array;
        ended = true;
      } finally {
        if (!ended && !response.destroyed) {
          const cut = setTimeout(() => response.destroy(), DRAIN_MS);
          cut.unref();
          response.once('close', () => clearTimeout(cut));
          response.resume();
        }
      }
    },
  };
}

function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new DOMException('This operation was aborted', 'AbortError');
}

/** True when `url` (an engine's health check) answers 2xx; an engine that cannot be reached is false, not an error. */
export async function engineHealthy(url: string, signal?: AbortSignal): Promise<boolean> {
  try {
    const response = await engineFetch(url, { timeoutMs: 5000, ...(signal ? { signal } : {}) });
    await response.arrayBuffer().catch(() => undefined);
    return response.ok;
  } catch (err) {
    if (signal?.aborted) throw err;
    return false;
  }
}

/** The JSON answer of `url`; an error status is ERR_ENGINE_REQUEST with the engine's message. */
export async function engineJson(url: string, options: HttpOptions = {}): Promise<unknown> {
  const response = await engineFetch(url, options);
  const text = await readText(response, url);
  if (!response.ok) {
    throw new EngineError(ErrorCodes.ENGINE_REQUEST, `${shortUrl(url)}: HTTP ${response.status}: ${errorMessage(text)}`, {
      details: { url, status: response.status },
    });
  }
  if (text.trim() === '') return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new EngineError(ErrorCodes.ENGINE_PROTOCOL, `${shortUrl(url)}: the answer is not JSON: ${text.slice(0, 200)}`, { details: { url } });
  }
}

/** The text of an answer; a connection cut while reading is ERR_ENGINE_UNAVAILABLE. */
export async function readText(response: Pick<StreamedAnswer, 'text'>, url: string): Promise<string> {
  try {
    return await response.text();
  } catch (err) {
    throw new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${shortUrl(url)}: the answer was cut: ${(err as Error).message}`, { cause: err });
  }
}

/** What an error body says: `{"error": {"message"}}`, `{"message"}`, `{"detail"}` or the text itself. */
export function errorMessage(text: string): string {
  try {
    const body = JSON.parse(text) as { error?: { message?: string } | string; message?: string; detail?: unknown };
    if (typeof body.error === 'object' && typeof body.error.message === 'string') return body.error.message;
    if (typeof body.error === 'string') return body.error;
    if (typeof body.message === 'string') return body.message;
    if (body.detail !== undefined) return typeof body.detail === 'string' ? body.detail : JSON.stringify(body.detail);
  } catch {
    // not JSON: the text is the message
  }
  return text.slice(0, 500);
}

export function protocolError(url: string, what: string): EngineError {
  return new EngineError(ErrorCodes.ENGINE_PROTOCOL, `${shortUrl(url)}: ${what}`, { details: { url } });
}

function shortUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.host}${u.pathname}`;
  } catch {
    return url;
  }
}

/**
 * The JSON events of a streamed answer (server-sent events) up to `[DONE]`, for a request named
 * `what` in errors. A non-2xx answer or an `error` event is ERR_ENGINE_REQUEST, an event that is
 * not a JSON object ERR_ENGINE_PROTOCOL, a stream cut while reading ERR_ENGINE_UNAVAILABLE; an
 * abort by `signal` is rethrown as is. The caller decides what an event that ends it looks like,
 * and that a stream ending without one means the server went away.
 */
export async function* streamedEvents(response: StreamedAnswer, url: string, what: string, signal: AbortSignal): AsyncGenerator<Record<string, unknown>> {
  if (!response.ok || !response.body) {
    const text = await readText(response, url);
    throw new EngineError(ErrorCodes.ENGINE_REQUEST, `${what}: HTTP ${response.status}: ${errorMessage(text)}`, { details: { status: response.status } });
  }
  const events = sseEvents(response.body);
  try {
    for (;;) {
      let next: IteratorResult<string>;
      try {
        next = await events.next();
      } catch (err) {
        if (signal.aborted) throw err;
        throw new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${what}: the stream was cut: ${(err as Error).message}`, { cause: err });
      }
      if (next.done || next.value === SSE_DONE) return;
      let event: unknown;
      try {
        event = JSON.parse(next.value);
      } catch {
        throw protocolError(url, `a stream event is not JSON: ${next.value.slice(0, 200)}`);
      }
      if (typeof event !== 'object' || event === null) throw protocolError(url, `a stream event is not an object: ${next.value.slice(0, 200)}`);
      if ('error' in event) throw new EngineError(ErrorCodes.ENGINE_REQUEST, `${what}: ${errorMessage(next.value)}`);
      yield event as Record<string, unknown>;
    }
  } finally {
    // A caller that stops early (at the finish event) ends the reading of the body too, rather
    // than leave it suspended: enginePost's reader then leaves the connection to the next
    // request, a fetch body is cancelled. Not awaited: nothing here waits on the peer.
    events.return(undefined).catch(() => undefined);
  }
}

/** A stream that ended without its finish: the server went away mid-answer. */
export function streamEnded(what: string): EngineError {
  return new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${what}: the stream ended without a finish reason`);
}
