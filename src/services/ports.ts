/** Free TCP ports on 127.0.0.1 and a readiness probe. */
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
