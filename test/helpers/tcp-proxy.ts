/**
 * A TCP proxy on loopback in front of a real server, for faults the server itself will not make:
 * while `refusing`, every new connection is closed at once (a client sees the connection reset
 * or closed before any answer, as when a server is not reachable for a moment); otherwise bytes
 * pass both ways untouched, and what clients sent is kept (`sent`).
 */
import net from 'node:net';

export interface TcpProxy {
  /** `http://127.0.0.1:<port>` of the proxy. */
  url: string;
  /** New connections are closed at once while true. */
  refusing: boolean;
  /** Everything clients sent through the proxy, as text, in order of arrival. */
  sent(): string;
  close(): Promise<void>;
}

export async function tcpProxy(targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  const sent: Buffer[] = [];
  const proxy: TcpProxy = { url: '', refusing: false, sent: () => Buffer.concat(sent).toString('utf8'), close: () => Promise.resolve() };
  const server = net.createServer((client) => {
    if (proxy.refusing) {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined); // the other side is ended below
    }
    client.on('data', (chunk: Buffer) => sent.push(chunk));
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  proxy.close = () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    });
  return proxy;
}
