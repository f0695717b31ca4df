/**
 * The engine state is the SDK's: a rollout written as docs/components/rollouts.md and
 * docs/examples/rollout.mjs show (acquireWeights, claim, append, complete; never setState) reports
 * `loading` only while it loads, `generating` while it holds trajectories and `idle` when it holds
 * none, and so the manager's repack planner, which considers `generating` rollouts only, repacks it.
 * Real nats-server, redis-server, relay process and manager.
 */
import { describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool } from '../../src/data/index.js';
import { Manager } from '../../src/manager/manager.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { RolloutEngine } from '../../src/rollout/engine.js';
import { RolloutClient } from '../../src/rollout/rollout-client.js';
import type { GenerationTask } from '../../src/rollout/task.js';
import { metricValue, natsClient, servicesFixture } from '../data/helpers.js';
import { publishVisible, spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const MODEL = 'org/docs';
const weights = [{ name: 'w', dtype: 'F32' as const, shape: [256], data: new Float32Array(256).fill(1) }];

const services = servicesFixture();

/** An engine as the docs write one: it holds the tasks it is handed and reports the KV use the test sets. */
class DocsEngine implements RolloutEngine {
  readonly running = new Set<GenerationTask>();
  kvUsed = 0;
  load() {
    return { kvUsed: this.kvUsed, running: this.running.size, waiting: 0, tokensPerSecond: 0 };
  }
  tokenize() {
    return Int32Array.of(1, 2, 3);
  }
  stop(tasks: readonly GenerationTask[]) {
    for (const t of tasks) this.running.delete(t);
    return Promise.resolve();
  }
  resume(tasks: readonly GenerationTask[]) {
    for (const t of tasks) this.running.add(t);
    return Promise.resolve();
  }
  updateWeights() {
    return Promise.resolve();
  }
  reinitialise() {
    return Promise.resolve();
  }
  /** Generates a token of every task it holds and completes them. */
  async finishAll(): Promise<void> {
    const tasks = [...this.running];
    this.running.clear();
    for (const t of tasks) if (t.append([4], [-0.5])) await t.complete({ reward: 1 });
  }
}

describe('rollout SDK: the engine state is the SDK’s', () => {
  it('reports loading, generating and idle by itself, and a rollout that follows the docs is repacked', async () => {
    const tmp = tempShmDir();
    let relay: RelayProcess | null = null;
    const registry = new Registry();
    const job = 'docs-state';
    const prompts = await PromptPool.open({ redis: services.redis, name: job, registry: new Registry() });
    await prompts.load(Array.from({ length: 4 }, (_, i) => ({ id: `p${i}`, payload: { q: i }, n: 2 })));
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: job, groups: prompts, registry: new Registry() });
    const partials = await PartialPool.open({ nc: services.nc, pool: job, writer, registry: new Registry() });
    const managerNc: NatsConnection = await natsClient(services.nats.url);
    const manager = new Manager({
      nc: managerNc,
      job,
      registry,
      leaseMs: 1000,
      tickMs: 50,
      rollouts: { partials, prompts, limits: { cMax: 0.99, rooflineBatch: 64 }, repackIntervalMs: 200, startupGraceMs: 0, commandTimeoutMs: 10_000 },
    });
    const rollouts: { client: RolloutClient; engine: DocsEngine }[] = [];
    try {
      await manager.start();
      await manager.whenLeader(10_000);
      relay = await spawnRelay(tmp.dir, ['--no-pin']);
      const trainer = await RelayClient.connect({ socketPath: relay.socketPath, reconnect: false });
      await publishVisible(trainer, { model: MODEL, version: 1, tensors: weights });
      trainer.close();

      const reported = (id: string) => manager.status().rollouts.find((r) => r.id === id);
      for (const id of ['ro-a', 'ro-b']) {
        const engine = new DocsEngine();
        const client = await RolloutClient.connect({
          nc: services.nc,
          job,
          id,
          model: MODEL,
          engine,
          prompts,
          partials,
          writer,
          relaySocket: relay.socketPath,
          heartbeatMs: 100,
          reconcileMs: 0,
        });
        rollouts.push({ client, engine });
        // As the docs: acquire, load from the lease, release.
        const acquired = await client.acquireWeights({ load: () => Promise.resolve() });
        await acquired.lease.release();
        // Loaded: idle (before the fix it stayed `loading` for good).
        expect(client.engineState).toBe('idle');
        await expect.poll(() => reported(id)?.state, { timeout: 10_000, message: `${id} did not report idle` }).toBe('idle');
        engine.kvUsed = 0.6;
        const tasks = await client.claim(2);
        expect(tasks).toHaveLength(4);
        await engine.resume(tasks);
        // Holding trajectories: generating (before the fix claim() left the state as it was).
        expect(client.engineState).toBe('generating');
      }
      const [a, b] = rollouts as [(typeof rollouts)[number], (typeof rollouts)[number]];
      await expect
        .poll(() => ['ro-a', 'ro-b'].map((id) => `${reported(id)?.state} ${reported(id)?.kvUsed}`), { timeout: 10_000 })
        .toEqual(['generating 0.6', 'generating 0.6']);

      // Both ramp down: the planner moves the smaller to the other. A rollout is a candidate only in
      // a round that sees its KV use below the previous round's, and the two heartbeats reach the
      // manager independently, so the use keeps falling (as in a real ramp-down) until one round
      // sees both fall; a single step could be seen by two rounds one rollout at a time, and then
      // neither round has two candidates.
      let fallen = 0;
      const rampDown = () => {
        fallen += 0.0002;
        a.engine.kvUsed = 0.2 - fallen;
        b.engine.kvUsed = 0.3 - fallen;
      };
      await expect
        .poll(() => (rampDown(), metricValue(registry, 'laminar_manager_repack_moves_total', { result: 'done' })), {
          timeout: 20_000,
          message: 'the docs-style rollouts were never repacked',
        })
        .toBeGreaterThan(0);
      expect(a.client.owned.size).toBe(0);
      expect(b.client.owned.size).toBe(8);
      // The source, emptied, is idle; the destination generates the moved trajectories too.
      expect(a.client.engineState).toBe('idle');
      expect(b.client.engineState).toBe('generating');

      // Every trajectory done: idle again.
      await b.engine.finishAll();
      expect(b.client.owned.size).toBe(0);
      expect(b.client.engineState).toBe('idle');
      await expect.poll(() => reported('ro-b')?.state, { timeout: 10_000 }).toBe('idle');
    } finally {
      for (const r of rollouts) await r.client.close();
      await manager.close();
      await partials.close();
      await managerNc.close();
      await relay?.stop('SIGKILL');
      tmp.cleanup();
    }
  }, 90_000);
});
