/**
 * A push from a host with several network interfaces (netns testbed), as issue #28 met it: the
 * pusher is the root namespace, whose relays sit behind a bridge beside its default interface
 * (eth0, the default route). The master, r0 on host 2, has a second NIC of its own (eth1, a
 * jumbo-frame network host 1 and the bridge do not reach). UCX left to use every interface on
 * both sides offers the peer addresses it cannot reach, and the push can die in UCX's handshake
 * with a bare UCS_ERR_ENDPOINT_TIMEOUT / UCS_ERR_CONNECTION_RESET: whether it does depends on how
 * UCX rates the host's own interfaces (it did on the machine the issue was met on, not on every
 * development VM), so no test asserts UCX's failure; what laminar decides is tested here and in
 * test/unit/net-devices.test.ts. laminar gives UCX the interface the kernel routes the master
 * through (the pusher) and the one holding the relay's own address (a relay), unless
 * UCX_NET_DEVICES is set; a setting that cannot carry the connection fails with ERR_NET_DEVICE,
 * naming the interface and the setting.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SECRET } from '../helpers/broadcast.js';
import { CLI, removeShmDir, spawnRelay, until, type RelayProcess } from '../helpers/relay.js';
import { claimFixedBed, createTestbed, type Testbed } from '../helpers/testbed.js';

process.env.UCX_TLS = 'tcp';
delete process.env.UCX_NET_DEVICES;

const PORT = 13337;
/**
 * Fixed addresses: which of the root namespace's equally reachable devices UCX picks when free to
 * use all of them (what the first test reproduces) depends on the testbed's subnet; these give
 * the failure the issue reported. Another suite running this file waits for this one's claim.
 */
const BED = 'nic2';
const BED_NET = '10.134.207';
/** The second network: host 2 alone is on it (no route to it from host 1). */
const SECOND_NET = '10.97.28';
/** Root-side end of host 2's second link; the bed's `down` removes it with host 2's namespace. */
const SECOND_LINK = `lmrx${BED}`;

interface PushResult {
  code: number;
  out: string;
}

/** `laminar publish --to` run in the root namespace with extra environment; resolves with its exit code and output. */
function push(env: string[], args: string[]): Promise<PushResult> {
  return new Promise((resolve) => {
    execFile('env', [...env, process.execPath, CLI, 'publish', ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, out: `${stdout}${stderr}` });
    });
  });
}

/** A one-tensor safetensors file of 1 MiB (a rendezvous-sized payload). */
function writeCheckpoint(path: string): void {
  const n = 1 << 18;
  let header = JSON.stringify({ w: { dtype: 'F32', shape: [n], data_offsets: [0, n * 4] } });
  header += ' '.repeat((8 - (header.length % 8)) % 8);
  const size = Buffer.alloc(8);
  size.writeBigUInt64LE(BigInt(header.length));
  const data = Buffer.alloc(n * 4);
  for (let i = 0; i < data.length; i++) data[i] = i % 251;
  writeFileSync(path, Buffer.concat([size, Buffer.from(header), data]));
}

describe('a pushing host with a second network interface (netns testbed)', () => {
  let bed: Testbed;
  let root: string;
  let secretFile: string;
  let checkpoint: string;
  const relays: RelayProcess[] = [];
  let master: string;

  beforeAll(async () => {
    bed = createTestbed(await claimFixedBed(BED, BED_NET, SECOND_NET, { timeoutMs: 240_000 }), 2);
    const ns = bed.hosts[1]!.netns;
    const ip = (...args: string[]): void => {
      execFileSync('ip', args);
    };
    ip('link', 'add', SECOND_LINK, 'mtu', '9000', 'type', 'veth', 'peer', 'name', `${SECOND_LINK}h`, 'mtu', '9000');
    ip('link', 'set', `${SECOND_LINK}h`, 'netns', ns);
    ip('addr', 'add', `${SECOND_NET}.1/24`, 'dev', SECOND_LINK);
    ip('link', 'set', SECOND_LINK, 'up');
    ip('-n', ns, 'link', 'set', `${SECOND_LINK}h`, 'name', 'eth1');
    ip('-n', ns, 'addr', 'add', `${SECOND_NET}.2/24`, 'dev', 'eth1');
    ip('-n', ns, 'link', 'set', 'eth1', 'up');
    ip('-n', ns, 'route', 'add', 'default', 'via', `${SECOND_NET}.1`, 'dev', 'eth1');

    root = mkdtempSync('/dev/shm/laminar-nic2-');
    secretFile = join(root, 'secret');
    writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
    checkpoint = join(root, 'm.safetensors');
    writeCheckpoint(checkpoint);
    // r0 (master) on the two-NIC host 2, r1 on host 1: the chain's link r0 -> r1 starts there.
    master = `${bed.hosts[1]!.address}:${PORT}`;
    const peers = `r0@${master},r1@${bed.hosts[0]!.address}:${PORT}`;
    for (const [i, id] of ['r0', 'r1'].entries()) {
      const args = ['--id', id, '--peers', peers, '--secret-file', secretFile, '--no-pin', '--log-level', 'info'];
      relays.push(await spawnRelay(join(root, id), args, ['ip', 'netns', 'exec', bed.hosts[1 - i]!.netns]));
    }
  }, 300_000);

  afterAll(async () => {
    for (const relay of relays) await relay.stop('SIGKILL');
    (bed as Testbed | undefined)?.destroy(); // unset when beforeAll failed
    try {
      execFileSync('ip', ['link', 'del', SECOND_LINK], { stdio: 'ignore' });
    } catch {
      // gone with host 2's namespace
    }
    if ((root as string | undefined) === undefined) return; // beforeAll failed before making it
    for (const id of ['r0', 'r1']) removeShmDir(join(root, id));
    rmSync(root, { recursive: true, force: true });
  });

  it('pushes over the interface the kernel routes the master through, and the chain carries it on from the two-NIC relay', async () => {
    const result = await push([], [checkpoint, '--model', 'm/a', '--version', '1', '--to', master, '--secret-file', secretFile, '--json']);
    expect(result.code, result.out).toBe(0);
    expect(JSON.parse(result.out.trim().split('\n').pop()!)).toMatchObject({ model: 'm/a', version: 1 });
    // The two-NIC relay chose the interface holding its address (and said so), not eth1.
    expect(relays[0]!.logs.join('\n')).toMatch(/"netDevices":\["eth0","lo"\],"reason":"eth0 holds this relay's address/);
    await until(
      'r1 to hold m/a v1',
      () => (relays[1]!.logs.some((line) => line.includes('"version complete"') && line.includes('"model":"m/a"')) ? true : undefined),
      30_000,
    );
  }, 60_000);

  it('a device forced by UCX_NET_DEVICES that cannot reach the master fails with ERR_NET_DEVICE naming it', async () => {
    const result = await push(
      [`UCX_NET_DEVICES=${SECOND_LINK}`],
      [checkpoint, '--model', 'm/b', '--version', '1', '--to', master, '--secret-file', secretFile],
    );
    expect(result.code, result.out).not.toBe(0);
    expect(result.out).toContain(
      `ERR_NET_DEVICE: the kernel routes ${bed.hosts[1]!.address} through lmrb-${BED}, but UCX here may use only ${SECOND_LINK} (UCX_NET_DEVICES)`,
    );
    expect(result.out).toContain(`Set UCX_NET_DEVICES to include lmrb-${BED}`);
  }, 60_000);
});
