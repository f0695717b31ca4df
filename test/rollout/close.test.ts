/**
 * A rollout stopping (SIGTERM: close the client, close the pools, drain NATS) while claims and
 * completions are on their way: each finishes before the connection drains (a claim's samples
 * started and the claim completed; a completion in the buffer and out of the partial pool).
 * Real nats-server (JetStream) and redis-server.
 */
import { describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { ExperienceWriter, PartialPool, PromptPool, bufferNames } from '../../src/data/index.js';
import { RolloutClient } from '../../src/rollout/rollout-client.js';
import { inertEngine } from '../helpers/engine.js';
import { natsClient, servicesFixture } from '../data/helpers.js';

const services = servicesFixture();

/**
 * A rollout client of job `job` (8 prompts of 4 samples loaded, weights at version 3) on a NATS
 * connection of its own, which the test drains as a stopping rollout process would.
 */
async function rolloutOnItsOwnConnection(
  job: string,
  id: string,
): Promise<{ nc: NatsConnection; prompts: PromptPool; partials: PartialPool; rollout: RolloutClient }> {
  const nc = await natsClient(services.nats.url);
  const prompts = await PromptPool.open({ redis: services.redis, name: job });
  await prompts.load(Array.from({ length: 8 }, (_, i) => ({ id: `p${i}`, payload: i, n: 4 })));
  const writer = await ExperienceWriter.open({ nc, buffer: job, groups: prompts });
  const partials = await PartialPool.open({ nc, pool: job, writer });
  const rollout = await RolloutClient.connect({ nc, job, id, model: 'm', engine: inertEngine(), prompts, partials, writer, relaySocket: null, reconcileMs: 0 });
  rollout.setWeightVersion(3);
  return { nc, prompts, partials, rollout };
}

describe('rollout: close with work in flight', () => {
  it('lets every completion on its way finish before it returns', async () => {
    const job = 'closing';
    const { nc, partials, rollout } = await rolloutOnItsOwnConnection(job, 'ro-closing');
    const tasks = await rollout.claim(8);
    expect(tasks.length).toBe(32);
    for (const t of tasks) expect(t.append(Int32Array.of(1, 2, 3, 4), Float32Array.of(-0.1, -0.2, -0.3, -0.4))).toBe(true);

    // What a SIGTERM handler does, started while the completions are in flight.
    const completions = tasks.map((t) => t.complete({ reward: 1 }));
    await rollout.close();
    await partials.close();
    await nc.drain();
    const outcomes = await Promise.allSettled(completions);
    expect(outcomes.filter((o) => o.status === 'rejected').map((o) => String(o.reason))).toEqual([]);
    expect(outcomes.map((o) => (o as PromiseFulfilledResult<string>).value)).toEqual(tasks.map(() => 'completed'));

    // Seen from another connection: nothing left in the partial pool, one record per trajectory.
    const other = await natsClient(services.nats.url);
    try {
      const pool = await PartialPool.open({ nc: other, pool: job });
      expect(await pool.list()).toEqual([]);
      await pool.close();
      const names = bufferNames(job);
      const info = await (await jetstreamManager(other)).streams.info(names.stream, { subjects_filter: names.recordFilter });
      expect(Object.keys(info.state.subjects ?? {}).length).toBe(32);
    } finally {
      await other.close();
    }
  });

  it('lets a claim on its way start its samples and complete before it returns', async () => {
    const job = 'closing-claim';
    const { nc, prompts, partials, rollout } = await rolloutOnItsOwnConnection(job, 'ro-claiming');
    const claiming = rollout.claim(8).then(
      (tasks) => tasks.length,
      (err: unknown) => (err as Error).message,
    );
    await rollout.close();
    await partials.close();
    await nc.drain();
    expect(await claiming).toBe(32);
    await expect(rollout.claim(1)).rejects.toMatchObject({ code: 'ERR_CLOSED' });

    // Every sample is in the partial pool under this rollout, and no prompt is left leased.
    const other = await natsClient(services.nats.url);
    try {
      const pool = await PartialPool.open({ nc: other, pool: job });
      const listed = await pool.list();
      expect(listed.length).toBe(32);
      expect(new Set(listed.map((s) => s.owner))).toEqual(new Set(['ro-claiming']));
      await pool.close();
    } finally {
      await other.close();
    }
    const progress = await prompts.progress();
    expect(progress.leased).toBe(0);
    expect(progress.completions).toBe(8);
  });
});
