/**
 * The rollout coordinator's orphan scan when the partial pool cannot be read, on a real
 * nats-server: the manager's reads of trajectory owners are refused (its user may not read the
 * pool's stream's messages through the JetStream API, where owners are read from the leader). A trajectory whose owner could not be read is not taken for "not
 * an orphan" until the next backstop scan a minute later: the failure is counted and logged, and
 * the scan runs again within seconds, so the dead rollout's trajectories resume on a live rollout
 * soon after the fault is gone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { PartialPool } from '../../src/data/index.js';
import { orphanCoordinator, startOrphans, takeRepackIns } from '../helpers/orphans.js';
import { partialNames } from '../../src/data/partial/partial-stream.js';
import type { RolloutView } from '../../src/manager/rollouts/coordinator.js';
import { metricValue } from '../data/helpers.js';
import { startPermissionedNats, type PermissionedNats } from '../helpers/nats-permissions.js';

const POOL = 'scanfaults';
const stream = partialNames(POOL).stream;
/** The stream leader's message get of the pool's stream: what startOf() uses to read a trajectory's owner (src/data/leader-read.ts). */
const MSG_GET = [`$JS.API.STREAM.MSG.GET.${stream}`];

let nats: PermissionedNats;
let admin: NatsConnection;
let restricted: NatsConnection;

beforeAll(async () => {
  nats = await startPermissionedNats(MSG_GET);
  admin = await nats.connect('admin');
  restricted = await nats.connect('restricted');
});
afterAll(async () => {
  await restricted.close();
  await admin.close();
  await nats.stop();
});

const live: RolloutView = {
  id: 'ro-live',
  health: 'alive',
  load: { state: 'generating', model: 'm', weightVersion: 2, kvUsed: 0.2, kvPrev: 0.2, running: 0, waiting: 0, owned: 0, tokensPerSecond: 100 },
};

describe('orphan scan: a partial pool that cannot be read', () => {
  it('counts and logs the failed reads, and scans again within seconds rather than after the backstop period', async () => {
    // The dead rollout's trajectories, written with full permissions.
    const writerPool = await PartialPool.open({ nc: admin, pool: POOL });
    await startOrphans(writerPool, 'ro-dead', 3);
    await writerPool.close();
    // The live rollout of the same version takes what it is sent.
    const received: string[][] = [];
    const sub = takeRepackIns(admin, 'test.member.ro-live', received);
    const partials = await PartialPool.open({ nc: restricted, pool: POOL });
    const {
      coordinator,
      registry,
      logs: warnings,
    } = orphanCoordinator(admin, {
      partials,
      prompts: null,
      commandTimeoutMs: 5000,
      // The backstop period is far beyond the test's limits: only a retry finds the orphans in time.
      orphanScanMs: 600_000,
    });
    // The manager's tick, every 50 ms.
    const ticker = setInterval(() => coordinator.tick([live]), 50);
    try {
      await expect
        .poll(() => metricValue(registry, 'laminar_manager_orphan_scan_failures_total', { step: 'owner' }), {
          timeout: 20_000,
          message: 'no failed owner read counted',
        })
        .toBeGreaterThanOrEqual(3);
      const warned = warnings.find((w) => w.msg === 'orphan scan could not read the partial pool: scanning again soon');
      expect(warned).toMatchObject({ unread: 3, retryMs: 2000 });
      expect(received).toEqual([]);
      // The fault is gone: the next scan, seconds later, finds the orphans and they resume on ro-live.
      await nats.deny([]);
      await expect.poll(() => received.flat().sort(), { timeout: 20_000, message: 'the orphans were not found again' }).toEqual(['g0/0', 'g1/0', 'g2/0']);
      await expect.poll(() => coordinator.status().orphansWaiting, { timeout: 5000 }).toBe(0);
    } finally {
      clearInterval(ticker);
      sub.unsubscribe();
      await partials.close();
    }
  }, 60_000);
});
