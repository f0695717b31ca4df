/** Free TCP ports on 127.0.0.1, starting a server on them despite races, and readiness probes. */
import { get } from 'node:http';
import { createServer, connect, type AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { ErrorCodes } from '../common/error-codes.js';
import { ServiceError } from './errors.js';

/** Asks the kernel for a free port (bind to 0), then releases it for the server to take. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** How many times a server is started on fresh ports after losing its ports to another process. */
const PORT_ATTEMPTS = 5;

/**
 * Starts a server on ports from freePort(), choosing them again when another process took one
 * between freePort() and the server's bind (the port is free when freePort() returns, and two
 * test files starting servers at once can pick the same one). `start` gets the attempt number and
 * picks its ports; a failure that is not a lost port, or ports the caller fixed, end it at once.
 */
export async function startOnFreePorts<T>(portsFixed: boolean, start: (attempt: number) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start(attempt);
    } catch (err) {
      if (portsFixed || attempt >= PORT_ATTEMPTS || !/address already in use|EADDRINUSE/i.test((err as Error).message)) throw err;
    }
  }
}

/**
 * Connects to 127.0.0.1:port, optionally writes `send`, and resolves with what the server
 * writes until `until` appears (default: the first CRLF) or `timeoutMs` passes. Rejects when
 * the connection is refused.
 */
export async function probe(port: number, send?: string, timeoutMs = 2000, until = '\r\n'): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect({ host: '127.0.0.1', port });
    let text = '';
    const timer = setTimeout(() => {
      sock.destroy();
      resolve(text);
    }, timeoutMs);
    sock.once('connect', () => {
      if (send !== undefined) sock.write(send);
    });
    sock.on('data', (b) => {
      text += b.toString('utf8');
      if (text.includes(until) || text.startsWith('-')) {
        clearTimeout(timer);
        sock.destroy();
        resolve(text);
      }
    });
    sock.once('error', (err) => {
      clearTimeout(timer);
      sock.destroy();
      reject(err);
    });
  });
}

/** GET http://127.0.0.1:port/path: its status and body, or null when nothing answers within `timeoutMs` (refused, reset, silent). */
export function localGet(port: number, path: string, timeoutMs = 1000): Promise<{ status: number; body: string } | null> {
  return new Promise((resolve) => {
    const req = get({ host: '127.0.0.1', port, path, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.once('error', () => resolve(null));
    });
    req.once('error', () => resolve(null));
    req.once('timeout', () => {
      req.destroy();
      resolve(null);
    });
  });
}

/**
 * Resolves once GET http://127.0.0.1:port/path answers 200, asked every 25 ms: for a server whose
 * last log line comes before it serves. ERR_SERVICE_START_FAILED when `exited` settles first (the
 * process is gone) or after `timeoutMs`.
 */
export async function untilAnswers(port: number, path: string, options: { name: string; exited: Promise<unknown>; timeoutMs: number }): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  // Set by the callback, read by the loop.
  const server: { exited: boolean; code?: unknown } = { exited: false };
  void options.exited.then((code) => {
    server.exited = true;
    server.code = code;
  });
  while ((await localGet(port, path))?.status !== 200) {
    if (server.exited)
      throw new ServiceError(ErrorCodes.SERVICE_START_FAILED, `${options.name} exited (${String(server.code)}) before ${path} answered 200`, {
        details: { port, path },
      });
    if (Date.now() > deadline)
      throw new ServiceError(ErrorCodes.SERVICE_START_FAILED, `${options.name}: ${path} did not answer 200 within ${options.timeoutMs} ms`, {
        details: { port, path },
      });
    await sleep(25);
  }
}
