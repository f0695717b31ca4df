/**
 * JSON over HTTP to an inference engine, with the errors the agent acts on: ERR_ENGINE_UNAVAILABLE
 * when the engine cannot be reached (it is down or restarting: the agent waits for it),
 * ERR_ENGINE_REQUEST when it answered an error status (the request was wrong or refused).
 */
import { ErrorCodes, LaminarError } from '../common/errors.js';
import { SSE_DONE, sseEvents } from './sse.js';

export class EngineError extends LaminarError {}

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
export async function readText(response: Response, url: string): Promise<string> {
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
export async function* streamedEvents(response: Response, url: string, what: string, signal: AbortSignal): AsyncGenerator<Record<string, unknown>> {
  if (!response.ok || !response.body) {
    const text = await readText(response, url);
    throw new EngineError(ErrorCodes.ENGINE_REQUEST, `${what}: HTTP ${response.status}: ${errorMessage(text)}`, { details: { status: response.status } });
  }
  const events = sseEvents(response.body);
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
}

/** A stream that ended without its finish: the server went away mid-answer. */
export function streamEnded(what: string): EngineError {
  return new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${what}: the stream ended without a finish reason`);
}
