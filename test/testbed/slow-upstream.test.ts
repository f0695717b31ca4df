/**
 * Stall detection over a slow shaped link, where one chunk takes a good share of the limit.
 * - A sender that waits on its own upstream longer than --peer-timeout, then goes on: the wait is
 *   not its successor's stall. A chunk takes longer than a stall check's period, so a stall
 *   clock that kept running through the wait would fire before the chunk lands.
 * - Chunks that each take more than half the limit: the peer is healthy and the version goes
 *   through, but the sender counts and says that it is close to dropping it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/common/logger.js';
import { BroadcastMetrics } from '../../src/relay/broadcast/metrics.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { Registry } from 'prom-client';
import { RoguePeer, SECRET, buildVersion, builtSource, sendOver } from '../helpers/broadcast.js';
import { spawnRelay, type RelayProcess } from '../helpers/relay.js';
import { claimBed, createTestbed, type Testbed } from '../helpers/testbed.js';

process.env.UCX_TLS = 'tcp';

const PORT = 13337;
const CHUNK = 4 * 1024 * 1024; // 0.34 s at 100 Mbit/s: longer than a stall check's period
const STALL_MS = 1000;

describe('stall detection across a wait on the upstream (netns testbed, 100 Mbit/s)', () => {
  let bed: Testbed;
  let root: string;
  let relay: RelayProcess;

  beforeAll(async () => {
    bed = createTestbed(claimBed('slw'), 1, { rate: '100mbit' });
    root = mkdtempSync('/dev/shm/laminar-slw-');
    const secretFile = join(root, 'secret');
    writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
    const host = bed.hosts[0]!;
    relay = await spawnRelay(
      join(root, 'r0'),
      ['--id', 'r0', '--peers', `r0@${host.address}:${PORT}`, '--secret-file', secretFile, '--no-pin', '--chunk-size', String(CHUNK), '--log-level', 'info'],
      ['ip', 'netns', 'exec', host.netns],
    );
  }, 60_000);

  afterAll(async () => {
    // Unset when beforeAll failed before assigning them.
    await (relay as RelayProcess | undefined)?.stop('SIGKILL');
    (bed as Testbed | undefined)?.destroy();
    rmSync(root, { recursive: true, force: true });
  });

  it('does not count the time spent waiting on its own upstream against the successor', async () => {
    const built = buildVersion('org/slow', 1, 3 * CHUNK, CHUNK);
    // Chunk 0 at once; the rest only after a wait longer than the stall limit, as when this
    // relay's own predecessor is being repaired.
    let release!: () => void;
    const later = new Promise<void>((resolve) => (release = resolve));
    let released = false;
    const source = builtSource(built, {
      available: (index) => index === 0 || released,
      whenAvailable: (index) => (index === 0 || released ? Promise.resolve() : later),
    });
    setTimeout(() => {
      released = true;
      release();
    }, STALL_MS + 1000);
    const peer = await RoguePeer.connect(`${bed.hosts[0]!.address}:${PORT}`, { id: 'upstream', role: 'publisher', relayId: 'r0' });
    try {
      const metrics = new BroadcastMetrics(new Registry(), () => 0);
      await expect(sendOver(peer.link, source, { window: 4, stallMs: STALL_MS, metrics, log: silentLogger })).resolves.toBe('complete');
      const client = await RelayClient.connect({ socketPath: relay.socketPath });
      try {
        const held = (await client.status()).versions.find((v) => v.model === 'org/slow');
        expect(held?.state).toBe('complete');
      } finally {
        client.close();
      }
    } finally {
      await peer.close();
      built.mapping.close();
    }
  }, 60_000);

  it('counts and says so when the peer takes more than half of the limit for each chunk', async () => {
    // 6 MiB at 100 Mbit/s: ~0.5 s a chunk (the receiver pulls one at a time), against a limit of 0.9 s.
    const chunk = 6 * 1024 * 1024;
    const stallMs = 900;
    const built = buildVersion('org/near-stall', 1, 3 * chunk, chunk);
    const warnings: { msg: string; waitedMs: number; stallMs: number }[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(JSON.parse(line) as (typeof warnings)[number]) });
    const registry = new Registry();
    const metrics = new BroadcastMetrics(registry, () => 0);
    const peer = await RoguePeer.connect(`${bed.hosts[0]!.address}:${PORT}`, { id: 'upstream', role: 'publisher', relayId: 'r0' });
    try {
      await expect(sendOver(peer.link, builtSource(built), { window: 4, stallMs, metrics, log })).resolves.toBe('complete');
    } finally {
      await peer.close();
      built.mapping.close();
    }
    const nearStalls = (await registry.getSingleMetric('laminar_relay_broadcast_near_stalls_total')!.get()).values[0]!.value;
    expect(nearStalls).toBeGreaterThanOrEqual(2);
    expect(nearStalls).toBeLessThanOrEqual(built.layout.chunkCount);
    // Said once for the transfer, with the figures and what to change.
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.waitedMs).toBeGreaterThan(stallMs / 2);
    expect(warnings[0]!.stallMs).toBe(stallMs);
    expect(warnings[0]!.msg).toMatch(/--peer-timeout.*--chunk-size/);
  }, 60_000);
});
