/**
 * Which network devices the UCX tests' workers use. Left to UCX, a worker opens every device that
 * is up when it is created, and even a loopback connection may put a lane on any of them. The
 * suite runs the soak beside these files, and the soak's testbed adds a bridge with an address to
 * the root namespace and deletes it a minute and a half later: a lane on it dies with it, and the
 * endpoint with the lane ("send: Endpoint timeout", seen once in a clean-clone `npm test`). So the
 * test workers use loopback alone (LOOPBACK in test/helpers/ucx.ts).
 */
import { execFileSync, spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { DIST_NATIVE, DIST_UCX, LOOPBACK, REPO, Workers, connect, requireDist } from '../helpers/ucx.js';

const workers = new Workers();

/** The devices UCX gave the endpoint's lanes ("tcp/lo", ...), from ucp_ep_print_info. */
const laneDevices = (info: string): string[] => [...info.matchAll(/lane\[\d+\]:\s+\d+:(\S+)\.\d+ /g)].map((m) => m[1]!);

/** Whether this process may make network and mount namespaces, mount sysfs in one and add a bridge there (root). */
function canUnshare(): boolean {
  try {
    const probe = 'mount --make-rprivate / && mount -t sysfs sysfs /sys && ip link add lmrprobe type bridge';
    execFileSync('unshare', ['-nm', 'sh', '-c', probe], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

// In a namespace of its own: sysfs for that namespace (UCX lists devices from /sys/class/net),
// loopback, and a bridge with an address, as a testbed leaves in the root namespace.
const NAMESPACE_SETUP = `
set -e
mount --make-rprivate / && mount -t sysfs sysfs /sys
ip link set lo up
ip link add lmrgone type bridge
ip addr add 10.213.7.254/24 dev lmrgone
ip link set lmrgone up
exec "$0" --input-type=module -e "$CHILD"`;

// Two pairs of workers, both created while the bridge is there: one with every device, one with
// loopback alone. The bridge goes, then each pair connects on 127.0.0.1 and moves a rendezvous
// payload; each prints its outcome.
const CHILD = `
import { execFileSync } from 'node:child_process';
import { UcxWorker } from ${JSON.stringify(DIST_UCX)};
import { Mapping } from ${JSON.stringify(DIST_NATIVE)};
const pairs = {
  every: [new UcxWorker(), new UcxWorker()],
  loopback: [new UcxWorker({ netDevices: ${JSON.stringify(LOOPBACK)} }), new UcxWorker({ netDevices: ${JSON.stringify(LOOPBACK)} })],
};
execFileSync('ip', ['link', 'del', 'lmrgone']);
const source = new Mapping(null, { size: 1 << 20 });
for (const [name, [server, client]] of Object.entries(pairs)) {
  let arrived;
  const message = new Promise((resolve) => (arrived = resolve));
  const listener = server.listen('127.0.0.1', 0, (ep) => (ep.onMessage = arrived));
  const ep = client.connect('127.0.0.1', listener.port);
  const closed = new Promise((resolve) => ep.onClose((err) => resolve(err)));
  const sending = ep.send(Buffer.from('payload'), { source, offset: 0, length: 1 << 20 });
  const received = message.then((m) => m.receiveInto(Buffer.alloc(1 << 20), 0));
  const moved = Promise.all([sending, received]).then(() => 'ok', (err) => err.code);
  // The endpoint failing decides as well as the payload arriving; the deadline only bounds a hang.
  const failed = closed.then((err) => err?.code ?? 'closed');
  const deadline = new Promise((resolve) => setTimeout(() => resolve('no outcome in 20 s'), 20000).unref());
  console.log('outcome ' + name + ' ' + (await Promise.race([moved, failed, deadline])));
  client.close();
  server.close();
}
source.close();
`;

describe('UCX test workers: loopback alone', () => {
  it('puts every lane of a test connection on the loopback device', async () => {
    const { client } = await connect(workers.create(), workers.create());
    const devices = laneDevices(client.info());
    expect(devices.length).toBeGreaterThan(0);
    expect(new Set(devices)).toEqual(new Set(['tcp/lo']));
    workers.closeAll();
  });

  it.skipIf(!canUnshare())('a device deleted after the workers were made fails a connection on every device, not one on loopback', async () => {
    requireDist();
    const child = spawn('unshare', ['-nm', 'bash', '-c', NAMESPACE_SETUP, process.execPath], {
      cwd: REPO,
      stdio: ['ignore', 'pipe', 'pipe'],
      // No UCX_NET_DEVICES: the first pair is what UCX does by itself.
      env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'UCX_NET_DEVICES')), CHILD },
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code, err).toBe(0);
    const outcome = (name: string): string | undefined =>
      /^outcome (\S+) (.*)$/m.exec(out.split('\n').find((l) => l.startsWith(`outcome ${name} `)) ?? '')?.[2];
    // UCX's TCP transport reports a lost connection as any of these (tcp_ep.c maps a failed
    // connect or send to UCS_ERR_ENDPOINT_TIMEOUT).
    expect(outcome('every'), out + err).toMatch(/^UCS_ERR_(ENDPOINT_TIMEOUT|UNREACHABLE|CONNECTION_RESET)$/);
    expect(outcome('loopback'), out + err).toBe('ok');
  });
});
