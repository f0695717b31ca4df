/**
 * The manager's report of the data the trainer gets, on a real nats-server: every record written
 * counted once with its inherent staleness (the trainer's newest announced version when it was
 * written − its generating version), the samplers' batch summaries as consumption staleness, a
 * malformed summary counted and ignored, and the record follower riding a nats-server restart.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { openControlBucket } from '../../src/control/bucket.js';
import { SCHEMA_VERSION, batchSummarySubject, encode } from '../../src/control/schema.js';
import { controlNames, Keys } from '../../src/control/subjects.js';
import { ExperienceSampler, ExperienceWriter } from '../../src/data/index.js';
import { Manager } from '../../src/manager/manager.js';
import { metricValue, natsFixture, trajectory } from '../data/helpers.js';

const nats = natsFixture();
const MODEL = 'org/staleness';

/** Sum and count of a histogram in a registry. */
async function histogram(registry: Registry, name: string): Promise<{ sum: number; count: number }> {
  const text = await registry.metrics();
  const read = (suffix: string): number => Number(new RegExp(`^${name}_${suffix} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { sum: read('sum'), count: read('count') };
}

describe('manager: completions, inherent and consumption staleness', () => {
  it("measures what is written against the announced version, adds the samplers' summaries, refuses junk, and rides a restart", async () => {
    const job = 'stale1';
    const buffer = 'stale1';
    const registry = new Registry();
    const manager = new Manager({
      nc: nats.nc,
      job,
      registry,
      leaseMs: 900,
      tickMs: 50,
      rollouts: { partials: null, prompts: null, repackIntervalMs: 0 },
      staleness: { buffer, model: MODEL },
    });
    await manager.start();
    await manager.whenLeader();
    try {
      const kv = await openControlBucket(nats.nc, controlNames(job).bucket);
      await kv.put(Keys.announce(MODEL), encode({ v: SCHEMA_VERSION, model: MODEL, version: 5, checkpoint: null, at: Date.now() }));
      await kv.put(Keys.announce('org/other'), encode({ v: SCHEMA_VERSION, model: 'org/other', version: 90, checkpoint: null, at: Date.now() }));
      await expect.poll(() => manager.status().newest.find((h) => h.model === MODEL)?.version, { timeout: 10_000 }).toBe(5);

      const writer = await ExperienceWriter.open({ nc: nats.nc, buffer });
      for (const [i, v] of [5, 4, 2].entries()) await writer.write(trajectory({ id: `s${i}`, weightVersion: v }));
      await expect.poll(() => metricValue(registry, 'laminar_manager_trajectories_completed_total'), { timeout: 10_000 }).toBe(3);
      // 0 + 1 + 3: against version 5 of its own model, not the other model's 90.
      expect(await histogram(registry, 'laminar_manager_inherent_staleness')).toEqual({ sum: 4, count: 3 });

      // A trainer at version 6 trains on the three: 1 + 2 + 4.
      const sampler = await ExperienceSampler.open({ nc: nats.nc, buffer, batchSize: 3, prefetch: false, trainerVersion: 6, registry: new Registry() });
      try {
        (await sampler.sample({ timeoutMs: 10_000 })).release();
        await expect.poll(() => histogram(registry, 'laminar_manager_consumption_staleness'), { timeout: 10_000 }).toEqual({ sum: 7, count: 3 });

        // Junk on the subject: counted, and the next summary still adds up.
        nats.nc.publish(batchSummarySubject(buffer), new TextEncoder().encode('not msgpack'));
        nats.nc.publish(batchSummarySubject(buffer), encode({ v: SCHEMA_VERSION, t: 'batch', buffer, trainerVersion: 6, staleness: [[-1, 2]] }));
        nats.nc.publish(batchSummarySubject(buffer), encode({ v: SCHEMA_VERSION, t: 'batch', buffer, trainerVersion: 6, staleness: [[3, 2]] }));
        await expect.poll(() => histogram(registry, 'laminar_manager_consumption_staleness'), { timeout: 10_000 }).toEqual({ sum: 13, count: 5 });
        expect(await metricValue(registry, 'laminar_manager_rejected_total', { code: ErrorCodes.CONTROL_DECODE })).toBe(1);
        expect(await metricValue(registry, 'laminar_manager_rejected_total', { code: ErrorCodes.CONTROL_SCHEMA })).toBe(1);
      } finally {
        await sampler.close();
      }

      // nats-server killed and started again: the follower comes back and misses nothing written after.
      await nats.server.restart({ kill: true });
      await writer.write(trajectory({ id: 's3', weightVersion: 5 }));
      await expect.poll(() => metricValue(registry, 'laminar_manager_trajectories_completed_total'), { timeout: 30_000 }).toBe(4);
    } finally {
      await manager.close();
    }
  }, 90_000);
});
