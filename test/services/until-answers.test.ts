/**
 * untilAnswers (src/services/ports.ts), what startVllm waits on after vLLM's "Application startup
 * complete", which uvicorn logs before its socket listens: it resolves on the first 200 from the
 * path, not on a refused connection or another status, and fails with ERR_SERVICE_START_FAILED
 * when the process exits first or the time runs out.
 */
import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { freePort, untilAnswers } from '../../src/services/ports.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

const never = new Promise<never>(() => undefined);

describe('untilAnswers', () => {
  it('waits through refused connections and other statuses for a 200', async () => {
    const port = await freePort();
    const seen: string[] = [];
    let settled = false;
    const waiting = untilAnswers(port, '/health', { name: 'server', exited: never, timeoutMs: 30_000 }).then(() => (settled = true));
    // Nothing listens yet: refused. Then a server that answers 503 to its first request.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(settled).toBe(false);
    const server = createServer((req, res) => {
      seen.push(req.url ?? '');
      res.statusCode = seen.length === 1 ? 503 : 200;
      res.end();
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    await waiting;
    expect(seen).toEqual(['/health', '/health']);
  });

  it('fails with ERR_SERVICE_START_FAILED when the process exits first, or in time', async () => {
    const port = await freePort();
    await expect(untilAnswers(port, '/health', { name: 'vllm', exited: Promise.resolve(1), timeoutMs: 30_000 })).rejects.toMatchObject({
      code: ErrorCodes.SERVICE_START_FAILED,
      message: 'vllm exited (1) before /health answered 200',
    });
    await expect(untilAnswers(port, '/health', { name: 'vllm', exited: never, timeoutMs: 100 })).rejects.toMatchObject({
      code: ErrorCodes.SERVICE_START_FAILED,
      message: 'vllm: /health did not answer 200 within 100 ms',
    });
  });
});
