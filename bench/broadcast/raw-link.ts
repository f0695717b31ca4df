/**
 * The raw limit of a link, measured in the same run as the relays: ucx_perftest's tag bandwidth
 * and latency (UCX over TCP, like a relay's hop) and a plain kernel TCP stream of the same bytes
 * (the floor under UCX). Separate because it measures the transport alone, with no relay.
 */
import { delay } from '../../src/common/concurrency.js';
import { exited, inNamespace, ucxEnv, type Resources } from './testbed.js';

export interface PerftestResult {
  iterations: number;
  /** Latency columns, microseconds (one-way for tag_lat: half the round trip). */
  typicalUs: number;
  averageUs: number;
  /** Overall bandwidth, bytes per second. */
  bandwidth: number;
}

/**
 * Runs ucx_perftest: a server in `serverNs`, a client in `clientNs` connecting to `host`. The
 * server exits after one test, so each call starts its own. "Final:" fields are iterations,
 * typical/average/overall latency (usec), average/overall bandwidth (MiB/s), message rates.
 */
export async function perftest(
  res: Resources,
  serverNs: string | null,
  clientNs: string | null,
  host: string,
  port: number,
  args: string[],
): Promise<PerftestResult> {
  let lastError = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const [scmd, sargs] = inNamespace(serverNs, 'ucx_perftest', ['-p', String(port)]);
    const server = res.spawn(scmd, sargs, ucxEnv(), 'ignore');
    await delay(300 + attempt * 300);
    const [ccmd, cargs] = inNamespace(clientNs, 'ucx_perftest', [host, '-p', String(port), ...args]);
    const client = res.spawn(ccmd, cargs, ucxEnv());
    let out = '';
    client.stdout?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    client.stderr?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    if (!(await exited(client, 300_000))) client.kill('SIGKILL');
    await exited(client, 5_000);
    if (!(await exited(server, 5_000))) server.kill('SIGKILL');
    const final = /^Final:\s+(.+)$/m.exec(out);
    if (final) {
      const f = final[1]!.trim().split(/\s+/).map(Number);
      return { iterations: f[0]!, typicalUs: f[1]!, averageUs: f[2]!, bandwidth: f[5]! * 2 ** 20 };
    }
    lastError = out.slice(-2000);
  }
  throw new Error(`ucx_perftest ${args.join(' ')} gave no result:\n${lastError}`);
}

/** perftest's tag bandwidth for `total` bytes in messages of `message` bytes, `window` in flight. */
export function bandwidthArgs(total: number, message: number, window: number): string[] {
  const iterations = Math.max(16, Math.ceil(total / message));
  const warmup = Math.max(2, Math.ceil(iterations / 8));
  return ['-t', 'tag_bw', '-s', String(message), '-n', String(iterations), '-w', String(warmup), '-O', String(window)];
}

export const LATENCY_ARGS = ['-t', 'tag_lat', '-s', '8', '-n', '5000', '-w', '500'];

// ---- plain kernel TCP, the floor under UCX --------------------------------------------------------

const TCP_SERVER = `const net = require('net');
const srv = net.createServer((s) => {
  let n = 0, t0 = 0;
  s.on('data', (d) => { if (!t0) t0 = performance.now(); n += d.length; });
  s.on('end', () => { console.log(JSON.stringify({ bytes: n, seconds: (performance.now() - t0) / 1e3 })); s.end(); srv.close(); });
});
srv.listen(Number(process.argv[1]), '0.0.0.0', () => console.log('listening'));`;

const TCP_CLIENT = `const net = require('net');
const [host, port, total] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3])];
const buf = Buffer.alloc(4 << 20, 7);
let left = total;
const s = net.connect(port, host, () => {
  const pump = () => {
    while (left > 0) {
      const n = Math.min(buf.length, left);
      left -= n;
      if (!s.write(buf.subarray(0, n))) return void s.once('drain', pump);
    }
    s.end();
  };
  pump();
});
s.resume();`;

/** Bytes per second of one plain TCP stream of `bytes` (Node's net, blocking in the kernel). */
export async function tcpStream(res: Resources, serverNs: string | null, clientNs: string | null, host: string, port: number, bytes: number): Promise<number> {
  const [scmd, sargs] = inNamespace(serverNs, process.execPath, ['-e', TCP_SERVER, String(port)]);
  const server = res.spawn(scmd, sargs, process.env);
  let out = '';
  const listening = new Promise<void>((resolve) => {
    server.stdout?.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      if (out.includes('listening')) resolve();
    });
  });
  await Promise.race([listening, delay(10_000)]);
  const [ccmd, cargs] = inNamespace(clientNs, process.execPath, ['-e', TCP_CLIENT, host, String(port), String(bytes)]);
  const client = res.spawn(ccmd, cargs, process.env, 'ignore');
  if (!(await exited(server, 300_000))) server.kill('SIGKILL');
  if (!(await exited(client, 5_000))) client.kill('SIGKILL');
  const line = out.split('\n').find((l) => l.startsWith('{'));
  if (line === undefined) throw new Error(`the TCP stream gave no result: ${out}`);
  const { bytes: got, seconds } = JSON.parse(line) as { bytes: number; seconds: number };
  if (got !== bytes) throw new Error(`the TCP stream moved ${got} bytes of ${bytes}`);
  return got / seconds;
}
