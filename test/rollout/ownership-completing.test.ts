/**
 * A rollout's take-over (reconciliation, reinitialise, repack-in) of a trajectory that another
 * process is completing: its record is still on its way. It is neither resumed nor returned nor
 * counted lost, but left for a later round (issue #47, the soak's double writes).
 */
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool } from '../../src/data/index.js';
import { Ownership } from '../../src/rollout/ownership.js';
import { RolloutMetrics } from '../../src/rollout/metrics.js';
import { heldWriter, servicesFixture, trajectory } from '../data/helpers.js';

const services = servicesFixture();

describe('rollout take-over of a trajectory being completed', () => {
  it('leaves it to its completer: not resumed, not returned, not lost', async () => {
    const job = 'owncompleting';
    const prompts = await PromptPool.open({ redis: services.redis, name: job, defaultGroupSize: 1 });
    await prompts.load([{ id: 'p0', payload: 'q' }]);
    const [claim] = await prompts.claim('ro-a', 1);
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: job, registry: new Registry() });
    const held = heldWriter(writer);
    const poolA = await PartialPool.open({ nc: services.nc, pool: job, writer: held.writer, registry: new Registry() });
    const poolB = await PartialPool.open({ nc: services.nc, pool: job, writer, registry: new Registry() });
    const id = `${claim!.groupId}/0`;
    const t = await poolA.start('ro-a', { trajectoryId: id, promptId: 'p0', groupId: claim!.groupId, sampleIndex: 0, groupSize: 1, weightVersion: 1 });
    t.append([1, 2, 3], [-1, -1, -1]);
    const completion = poolA.complete(t, trajectory({ id, promptId: 'p0', groupId: claim!.groupId, weightVersion: 1 }));
    await held.writing;

    const ownership = new Ownership({
      rolloutId: 'ro-b',
      partials: poolB,
      prompts,
      metrics: new RolloutMetrics(new Registry()),
      log: pino({ level: 'silent' }),
      tasks: new Map(),
      weightVersion: () => 1,
      // Resumed, it would be generated again while its record lands: never called here.
      adopt: (partial) => {
        throw new Error(`${partial.trajectoryId} resumed while being completed`);
      },
      resume: () => Promise.resolve(),
    });
    // Same weight version: taken over, it would be resumed, and its record land anyway.
    // Named with the grace left, so that whoever sent it (the manager's repack-in) asks again after it.
    expect(await ownership.takeOverAndResume([id], 'ro-a', 'stranded')).toEqual({
      taken: 0,
      completed: 0,
      lost: 0,
      returned: 0,
      completing: [{ trajectory: id, retryAfterMs: expect.any(Number) as number }],
    });
    expect(await poolB.summary(id)).toMatchObject({ owner: 'ro-a', state: 'completing' });
    expect(await prompts.progress()).toMatchObject({ returnedEntries: 0 });

    held.release();
    await expect(completion).resolves.toMatchObject({ duplicate: false });
    expect(await writer.has(id)).toBe(true);
    expect(await poolB.summary(id)).toBeUndefined();
    await poolA.close();
    await poolB.close();
  });
});
