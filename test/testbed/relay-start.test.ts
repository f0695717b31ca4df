/**
 * A relay started while its network interface is down: UCX would leave that interface out for
 * good, so the relay refuses to start, with a code that says why, rather than run unreachable.
 * Once the link is up, the same command starts and serves a peer.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RoguePeer, SECRET } from '../helpers/broadcast.js';
import { spawnRelay } from '../helpers/relay.js';
import { claimBed, createTestbed, type Testbed } from '../helpers/testbed.js';

process.env.UCX_TLS = 'tcp';

const PORT = 13337;

describe('relay start-up on a host whose link is down (netns testbed)', () => {
  let bed: Testbed;
  let root: string;
  let args: string[];

  beforeAll(() => {
    bed = createTestbed(claimBed('rst'), 1);
    root = mkdtempSync('/dev/shm/laminar-rst-');
    const secretFile = join(root, 'secret');
    writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
    args = ['--id', 'r0', '--peers', `r0@${bed.hosts[0]!.address}:${PORT}`, '--secret-file', secretFile, '--no-pin', '--log-level', 'info'];
  });

  afterAll(() => {
    (bed as Testbed | undefined)?.destroy(); // unset when beforeAll failed
    rmSync(root, { recursive: true, force: true });
  });

  it('refuses to start with ERR_ADDRESS_NOT_UP, then starts and serves once the link is up', async () => {
    const host = bed.hosts[0]!;
    const wrap = ['ip', 'netns', 'exec', host.netns];
    host.link('down');
    await expect(spawnRelay(join(root, 'down'), args, wrap)).rejects.toThrow(
      /exited \(1\) before it was ready[\s\S]*ERR_ADDRESS_NOT_UP: 10\.\d+\.\d+\.\d+ is on no network interface/,
    );

    host.link('up');
    const relay = await spawnRelay(join(root, 'up'), args, wrap);
    try {
      const peer = await RoguePeer.connect(`${host.address}:${PORT}`, { id: 'upstream', role: 'publisher', relayId: 'r0' });
      await peer.close();
    } finally {
      await relay.stop('SIGKILL');
    }
  }, 60_000);
});
