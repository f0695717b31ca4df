/**
 * enginePost (http.ts): the streamed `/generate` POST over node:http, against a real local HTTP
 * server: kept-alive connections (a reader that stops at the finish event leaves the connection
 * for the next request), and the errors engineFetch gives (unreachable, timeout, abort).
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { enginePost, streamedEvents } from '../../src/rollout-agent/http.js';

let server: http.Server;
let url: string;
/** Connections the server accepted, and those the client closed while an answer was streaming. */
const sockets = new Set<Socket>();
let cutWhileStreaming = 0;

beforeAll(async () => {
  const served = new WeakMap<Socket, number>();
  server = http.createServer((req, res) => {
    const n = (served.get(req.socket) ?? 0) + 1;
    served.set(req.socket, n);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { mode: string; echo?: unknown };
      if (body.mode === 'closing' && n > 1) {
        // A server closing an idle connection as a request comes in on it: nothing is answered.
        req.socket.destroy();
        return;
      }
      if (body.mode === 'refuse') {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'bad sampling field' } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (body.mode === 'hang') {
        // One event, then nothing until the client goes away.
        res.write(`data: ${JSON.stringify({ n: 0 })}\n\n`);
        res.on('close', () => {
          if (!res.writableFinished) cutWhileStreaming++;
        });
        return;
      }
      res.write(`data: ${JSON.stringify({ n: 0, echo: body.echo })}\n\n`);
      res.write(`data: ${JSON.stringify({ n: 1, finish: true })}\n\n`);
      // The rest comes a little later, as an engine's [DONE] after its last chunk.
      setTimeout(() => res.end('data: [DONE]\n\n'), 20);
    });
  });
  server.on('connection', (s: Socket) => sockets.add(s));
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/generate`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

/** Reads events up to the one with `finish` (not to the end), as SglangClient.generate does. */
async function untilFinish(body: unknown, signal = new AbortController().signal): Promise<unknown[]> {
  const seen: unknown[] = [];
  const answer = await enginePost(url, { body, signal, timeoutMs: 10_000 });
  for await (const event of streamedEvents(answer, url, 'test', signal)) {
    seen.push(event);
    if (event.finish) break;
  }
  return seen;
}

describe('enginePost', () => {
  it('streams the answer; a reader that stops at the finish leaves the connection to the next request', async () => {
    const before = sockets.size;
    expect(await untilFinish({ mode: 'stream', echo: [1, 2, 3] })).toEqual([
      { n: 0, echo: [1, 2, 3] },
      { n: 1, finish: true },
    ]);
    // The rest of the first answer ([DONE] and its end) is read and dropped meanwhile.
    await new Promise((r) => setTimeout(r, 100));
    expect(await untilFinish({ mode: 'stream', echo: 'again' })).toEqual([
      { n: 0, echo: 'again' },
      { n: 1, finish: true },
    ]);
    expect(sockets.size - before).toBe(1);
  });

  it('a request on a kept-alive connection that the server closes meanwhile goes again on a new one', async () => {
    const before = sockets.size;
    expect(await untilFinish({ mode: 'closing', echo: 1 })).toEqual([
      { n: 0, echo: 1 },
      { n: 1, finish: true },
    ]);
    await new Promise((r) => setTimeout(r, 100));
    expect(await untilFinish({ mode: 'closing', echo: 2 })).toEqual([
      { n: 0, echo: 2 },
      { n: 1, finish: true },
    ]);
    expect(sockets.size - before).toBe(2);
  });

  it('an error status comes back as an answer with its text; streamedEvents makes it ERR_ENGINE_REQUEST', async () => {
    const answer = await enginePost(url, { body: { mode: 'refuse' } });
    expect(answer.ok).toBe(false);
    expect(answer.status).toBe(400);
    const again = await enginePost(url, { body: { mode: 'refuse' } });
    const events = streamedEvents(again, url, 'generate r1', new AbortController().signal);
    await expect(events.next()).rejects.toMatchObject({ code: ErrorCodes.ENGINE_REQUEST, message: expect.stringContaining('bad sampling field') as string });
    expect(await answer.text()).toContain('bad sampling field');
  });

  it('an engine that cannot be reached is ERR_ENGINE_UNAVAILABLE', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    await expect(enginePost(`http://127.0.0.1:${port}/generate`, { body: {} })).rejects.toMatchObject({
      code: ErrorCodes.ENGINE_UNAVAILABLE,
      message: expect.stringContaining('ECONNREFUSED') as string,
    });
  });

  it('an abort while the answer streams cuts the connection (the engine aborts the request); the reader sees the abort', async () => {
    const controller = new AbortController();
    const cut = cutWhileStreaming;
    const answer = await enginePost(url, { body: { mode: 'hang' }, signal: controller.signal });
    const events = streamedEvents(answer, url, 'generate r2', controller.signal);
    expect((await events.next()).value).toEqual({ n: 0 });
    setTimeout(() => controller.abort(), 20);
    await expect(events.next()).rejects.toBeDefined();
    await expect.poll(() => cutWhileStreaming).toBe(cut + 1);
    // Aborted before it is sent: rejected at once with the signal's reason.
    await expect(enginePost(url, { body: { mode: 'stream' }, signal: controller.signal })).rejects.toBe(controller.signal.reason);
  });

  it('the timeout counts over the whole answer: a stream that stops coming is cut as ERR_ENGINE_UNAVAILABLE', async () => {
    const signal = new AbortController().signal;
    const answer = await enginePost(url, { body: { mode: 'hang' }, signal, timeoutMs: 200 });
    const events = streamedEvents(answer, url, 'generate r3', signal);
    expect((await events.next()).value).toEqual({ n: 0 });
    await expect(events.next()).rejects.toMatchObject({
      code: ErrorCodes.ENGINE_UNAVAILABLE,
      message: expect.stringContaining('the stream was cut') as string,
    });
  });
});
