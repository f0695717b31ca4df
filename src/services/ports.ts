/** Free TCP ports on 127.0.0.1, starting a server on them despite races, and a readiness probe. */
import { createServer, connect, type AddressInfo } from 'node:net';

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
