/**
 * Faults during a chain broadcast across network-namespace hosts (relay processes, UCX over TCP
 * through tc-shaped links): a relay SIGKILLed at the head, in the middle and at the tail, and a
 * host's link taken down mid-transfer. In every case the surviving relays end with the version
 * byte-identical and verified, and nothing partial is ever visible.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { SECRET, segmentDigest } from '../helpers/broadcast.js';
import { spawnRelay, type RelayProcess } from '../helpers/relay.js';
import { claimBed, createTestbed, type Testbed } from '../helpers/testbed.js';
import { printLogsIfFailed } from '../helpers/failure-logs.js';

// Between namespaces of one machine UCX would pick shared memory; TCP is what crosses the links.
process.env.UCX_TLS = 'tcp';

const HOSTS = 4;
const PORT = 13337;
const MODEL = 'org/faults';
const BYTES = 160 * 1024 * 1024;
const CHUNK = 4 * 1024 * 1024;
const CHUNKS = BYTES / CHUNK;

interface Member {
  id: string;
  root: string;
  process: RelayProcess;
  client: RelayClient;
}

describe('chain broadcast under faults (netns testbed)', () => {
  let bed: Testbed;
  let secretFile: string;
  let scratch: string;
  let members: Member[] = [];
  let peers = '';

  beforeAll(() => {
    bed = createTestbed(claimBed('bcf'), HOSTS, { rate: '1gbit' });
    scratch = mkdtempSync('/dev/shm/laminar-bcf-');
    secretFile = join(scratch, 'secret');
    writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
    peers = bed.hosts.map((h, i) => `r${i}@${h.address}:${PORT}`).join(',');
  });

  afterEach(async (context) => {
    printLogsIfFailed(
      context,
      members.map((m) => ({ name: m.id, logs: m.process.logs })),
    );
    for (const m of members) {
      m.client.close();
      await m.process.stop('SIGKILL');
      rmSync(m.root, { recursive: true, force: true });
    }
    members = [];
  });

  afterAll(() => {
    bed.destroy();
    rmSync(scratch, { recursive: true, force: true });
  });

  async function start(i: number, root = mkdtempSync('/dev/shm/laminar-bcf-r')): Promise<Member> {
    const process = await spawnRelay(
      root,
      [
        '--id',
        `r${i}`,
        '--peers',
        peers,
        '--secret-file',
        secretFile,
        '--no-pin',
        '--chunk-size',
        String(CHUNK),
        '--keep-versions',
        '0',
        '--peer-timeout',
        '2s',
        '--retry-interval',
        '1s',
        '--handshake-timeout',
        '2s',
        '--log-level',
        'info',
      ],
      ['ip', 'netns', 'exec', bed.hosts[i]!.netns],
    ).catch((err: unknown) => {
      rmSync(root, { recursive: true, force: true });
      throw err;
    });
    const client = await RelayClient.connect({ socketPath: process.socketPath });
    return { id: `r${i}`, root, process, client };
  }

  async function startAll(): Promise<void> {
    // One by one into `members`, so that afterEach stops whatever started even if one fails.
    for (let i = 0; i < HOSTS; i++) members.push(await start(i));
  }

  /** Publishes version 1 at the master; resolves once the master serves it (verified). */
  async function publish(): Promise<unknown> {
    const data = new Uint8Array(BYTES);
    for (let i = 0; i < BYTES; i += 4099) data[i] = (i * 13) & 0xff;
    return (await members[0]!.client.publish({ model: MODEL, version: 1, tensors: [{ name: 'w', dtype: 'U8', shape: [BYTES], data }] })).visible;
  }

  async function receivedBy(m: Member): Promise<number> {
    const status = await m.client.status();
    const done = status.versions.some((v) => v.model === MODEL && v.state === 'complete');
    // All chunks verified but not yet renamed complete still counts as not there.
    return done ? CHUNKS : Math.min(CHUNKS - 1, status.broadcast?.receiving.find((r) => r.model === MODEL)?.hwm ?? 0);
  }

  async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** A relay's log line saying it delivered the version to `peer` downstream. */
  function delivered(line: string, peer: string): boolean {
    if (!line.includes('version delivered downstream')) return false;
    const entry = JSON.parse(line) as { peer?: string; model?: string };
    return entry.peer === peer && entry.model === MODEL;
  }

  /** Every listed member holds the version complete, identical to the master's bytes. */
  async function expectIdentical(survivors: Member[], reference: string): Promise<void> {
    for (const m of survivors) {
      await waitFor(`${m.id} to complete`, async () => (await receivedBy(m)) === CHUNKS);
      const status = await m.client.status();
      const held = status.versions.find((v) => v.model === MODEL)!;
      expect(held.state).toBe('complete');
      expect(segmentDigest(held.path), `${m.id} holds different bytes`).toBe(reference);
      // And a reader sees it through the normal path.
      await using lease = await m.client.acquire({ model: MODEL });
      expect(lease.version).toBe(1);
    }
  }

  async function masterDigest(): Promise<string> {
    const status = await members[0]!.client.status();
    return segmentDigest(status.versions.find((v) => v.model === MODEL)!.path);
  }

  /** Nothing partial is visible to readers: acquiring on `m` finds no version until it is complete. */
  async function expectNothingPartial(m: Member): Promise<void> {
    if ((await receivedBy(m)) === CHUNKS) return;
    await expect(m.client.acquire({ model: MODEL })).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_UNKNOWN_(MODEL|VERSION)$/) as unknown });
  }

  it('skips a middle relay killed mid-broadcast; the next one resumes from its high-water mark', async () => {
    await startAll();
    await publish();
    const reference = await masterDigest();
    await waitFor('r2 to be receiving', async () => (await receivedBy(members[2]!)) >= 6);
    expect(await receivedBy(members[2]!)).toBeLessThan(CHUNKS);
    await expectNothingPartial(members[3]!);
    members[1]!.process.child.kill('SIGKILL');
    await expectIdentical([members[0]!, members[2]!, members[3]!], reference);
    const status = await members[0]!.client.status();
    expect(status.broadcast?.downstream?.id).toBe('r2');
  }, 120_000);

  it('carries on when the tail is killed mid-broadcast', async () => {
    await startAll();
    await publish();
    const reference = await masterDigest();
    await waitFor('r3 to be receiving', async () => (await receivedBy(members[3]!)) >= 4);
    members[3]!.process.child.kill('SIGKILL');
    await expectIdentical([members[1]!, members[2]!], reference);
    expect(members[2]!.process.child.exitCode).toBeNull();
  }, 120_000);

  it("resumes from the relays' marks when a killed master restarts with its shared memory", async () => {
    await startAll();
    await publish();
    const reference = await masterDigest();
    await waitFor('r1 to be receiving', async () => (await receivedBy(members[1]!)) >= 6);
    members[0]!.client.close();
    await members[0]!.process.stop('SIGKILL');
    const before = await receivedBy(members[3]!);
    expect(before).toBeLessThan(CHUNKS);
    await expectNothingPartial(members[3]!);
    members[0] = await start(0, members[0]!.root); // recovers the complete version from /dev/shm
    await expectIdentical(members, reference);
  }, 120_000);

  it('skips a relay whose link went down, and catches it up when the link is back', async () => {
    await startAll();
    await publish();
    const reference = await masterDigest();
    await waitFor('r2 to be receiving', async () => (await receivedBy(members[2]!)) >= 6);
    bed.hosts[2]!.link('down');
    try {
      await expectIdentical([members[0]!, members[1]!, members[3]!], reference);
      await expectNothingPartial(members[2]!);
    } finally {
      bed.hosts[2]!.link('up');
    }
    await expectIdentical([members[2]!], reference);
  }, 120_000);

  it('connects past a relay that never answers: the handshake has a deadline', async () => {
    // r2's relay traffic is black-holed (its host still answers ARP): a connect to it gets no
    // answer and no reset, and the transport retries for minutes, so only the handshake's
    // deadline moves r1 on to r3. r1 starts last, so that its first attempt (the one it logs)
    // meets the black hole.
    for (const i of [2, 3]) members.push(await start(i));
    bed.hosts[2]!.stall(PORT, true);
    let stalled = true;
    try {
      for (const i of [0, 1]) members.push(await start(i));
      members.sort((a, b) => a.id.localeCompare(b.id));
      await publish();
      const reference = await masterDigest();
      await expectIdentical([members[0]!, members[1]!, members[3]!], reference);
      const status = await members[1]!.client.status();
      expect(status.broadcast?.downstream?.id).toBe('r3');
      const unreachable = members[1]!.process.logs.filter((line) => line.includes('cannot reach the next relay')).map((line) => JSON.parse(line) as unknown);
      expect(unreachable).toContainEqual(expect.objectContaining({ peer: 'r2', code: 'ERR_TIMEOUT' }));
      await expectNothingPartial(members[2]!);
      bed.hosts[2]!.stall(PORT, false);
      stalled = false;
      await expectIdentical([members[2]!], reference);
    } finally {
      if (stalled) bed.hosts[2]!.stall(PORT, false);
    }
  }, 120_000);

  it('skips a relay that went dark after it took everything: its successor gets the version from the one before', async () => {
    // r3 is starved, so r2 holds the whole version while r3 holds none of it. Then r2's link
    // drops: r1 has nothing left to send r2 and no chunk in flight, so only the keepalive can
    // tell it that r2 is gone and r3 must be served from r1.
    // r3's port is black-holed before any relay starts: stalled after startAll(), r2's retry
    // (every --retry-interval) could connect to r3 first, and on a loaded machine it did; r3 then
    // took the version from r2, and r1 never had to skip r2 before the test looked at its log.
    bed.hosts[3]!.stall(PORT, true);
    let stalled = true;
    try {
      await startAll();
      await publish();
      const reference = await masterDigest();
      await waitFor('r2 to hold the version', async () => (await receivedBy(members[2]!)) === CHUNKS);
      // r2 holding it is not yet r1 done with it: r2's last answer (the transfer complete) may still
      // be on its way, and a link dropped then leaves r1 a transfer in flight, which its stall
      // timer (ERR_TIMEOUT) ends rather than the keepalive. r1's own word that it delivered the
      // version is the moment "nothing left to send r2" holds.
      await waitFor('r1 to be done sending to r2', () => Promise.resolve(members[1]!.process.logs.some((line) => delivered(line, 'r2'))));
      expect(await receivedBy(members[3]!)).toBe(0);
      bed.hosts[2]!.link('down');
      bed.hosts[3]!.stall(PORT, false);
      stalled = false;
      await expectIdentical([members[0]!, members[1]!, members[3]!], reference);
      // (The relays' metrics listen inside their namespaces; r1's log says why it moved on.)
      const gaveUp = members[1]!.process.logs.filter((line) => line.includes('downstream relay lost')).map((line) => JSON.parse(line) as unknown);
      expect(gaveUp).toContainEqual(expect.objectContaining({ peer: 'r2', code: 'ERR_PEER_SILENT' }));
    } finally {
      if (stalled) bed.hosts[3]!.stall(PORT, false);
      bed.hosts[2]!.link('up');
    }
  }, 120_000);
});
