/**
 * The manager's rollout coordinator on real NATS: a rollout that still looks alive but answers
 * nothing (on its way out: nobody subscribes to its subject) is passed over after one failed
 * command, so a dead rollout's trajectories go to a rollout that answers at once, instead of
 * being sent to the silent one on every tick until heartbeats declare it dead.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { PartialPool } from '../../src/data/index.js';
import { orphanCoordinator, startOrphans, takeRepackIns } from '../helpers/orphans.js';
import type { RolloutView } from '../../src/manager/rollouts/coordinator.js';
import { startNatsServer, type NatsServer } from '../../src/services/index.js';
import { natsClient } from '../data/helpers.js';

let nats: NatsServer;
let nc: NatsConnection;

beforeAll(async () => {
  nats = await startNatsServer({ jetstream: true });
  nc = await natsClient(nats.url);
});
afterAll(async () => {
  await nc.close();
  await nats.stop();
});

const view = (id: string, owned: number): RolloutView => ({
  id,
  health: 'alive',
  load: { state: 'generating', model: 'm', weightVersion: 2, kvUsed: 0.2, kvPrev: 0.2, running: owned, waiting: 0, owned, tokensPerSecond: 100 },
});

describe('rollout coordinator: a destination that does not answer', () => {
  it('sends the orphans to the next rollout of their version after one failed command', async () => {
    const partials = await PartialPool.open({ nc, pool: 'unreachable' });
    await startOrphans(partials, 'ro-dead', 3);
    // ro-answers takes what it is sent; ro-silent (fewest owned: the first choice) has no subscriber.
    const received: string[][] = [];
    const sub = takeRepackIns(nc, 'test.member.ro-answers', received);
    const { coordinator, logs: warnings } = orphanCoordinator(nc, { partials, prompts: null, commandTimeoutMs: 1000, orphanScanMs: 60_000 });
    try {
      const rollouts = [view('ro-silent', 0), view('ro-answers', 7)];
      // The manager ticks every 100 ms; the silent rollout stays "alive" throughout.
      const deadline = Date.now() + 3000;
      while (received.length === 0 && Date.now() < deadline) {
        coordinator.tick(rollouts);
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(received.map((ids) => ids.sort())).toEqual([['g0/0', 'g1/0', 'g2/0']]);
      expect(warnings.filter((w) => w.msg === 'cannot resume orphans there (retrying)').map((w) => w.to)).toEqual(['ro-silent']);
      expect(coordinator.status().orphansWaiting).toBe(0);
    } finally {
      sub.unsubscribe();
      await partials.close();
    }
  });
});
