/**
 * A sample the manager returned (its trajectory parked: it was started with weights no rollout
 * holds any more) is started again by the rollout that claims it, in the same log, in one step:
 * its new start replaces the parked one, and the old tokens are neither resumed nor kept.
 * Real nats-server, redis-server and relay process.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import type { JetStreamManager } from '@nats-io/jetstream';
import { ExperienceSampler, ExperienceWriter, PARKED_OWNER, PartialPool, PromptPool } from '../../src/data/index.js';
import { RolloutClient } from '../../src/rollout/rollout-client.js';
import { trajectoryIdOf } from '../../src/rollout/ids.js';
import { metricValue, servicesFixture, trajectory } from '../data/helpers.js';
import { inertEngine } from '../helpers/engine.js';
import { relayEachTest } from '../helpers/relay.js';

const MODEL = 'org/returned';
const services = servicesFixture();
const fx = relayEachTest();

describe('rollout: a returned sample starts again in its own log', () => {
  const { closers } = fx;

  /** A job's prompt pool (one prompt, n = 2), experience writer and partial pool. */
  async function poolsOf(job: string) {
    const registry = new Registry();
    const prompts = await PromptPool.open({ redis: services.redis, name: job });
    await prompts.load([{ id: 'q0', payload: { text: 'q' }, n: 2 }]);
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: job, groups: prompts });
    const partials = await PartialPool.open({ nc: services.nc, pool: job, writer, registry });
    closers.push(() => partials.close());
    return { registry, prompts, writer, partials };
  }

  /** A rollout 'ro-new' with the relay's newest weights claims one prompt: the tasks it starts. */
  async function claimAsNewRollout(job: string, prompts: PromptPool, partials: PartialPool, writer: ExperienceWriter) {
    const rollout = await RolloutClient.connect({
      nc: services.nc,
      job,
      id: 'ro-new',
      model: MODEL,
      engine: inertEngine(),
      prompts,
      partials,
      writer,
      relaySocket: fx.relay.socketPath,
      reconcileMs: 0,
    });
    closers.push(() => rollout.close());
    const weights = await rollout.acquireWeights();
    await weights.lease.release();
    return rollout.claim(1);
  }

  it('the claiming rollout restarts the parked trajectory with its own weights, atomically', async () => {
    const job = 'returned1';
    await fx.publish(MODEL, 2);

    const { registry, prompts, writer, partials } = await poolsOf(job);

    // A rollout of version 1 started both samples and generated some tokens, then went away;
    // the manager parked sample 1 (no rollout holds version 1 any more) and returned it.
    const [claim] = await prompts.claim('ro-old', 1);
    const ids = [0, 1].map((i) => trajectoryIdOf(claim!.groupId, i));
    for (const [i, trajectoryId] of ids.entries()) {
      const t = await partials.start('ro-old', { trajectoryId, promptId: 'q0', groupId: claim!.groupId, sampleIndex: i, groupSize: 2, weightVersion: 1 });
      t.append(Int32Array.of(11, 12, 13), Float32Array.of(-1, -1, -1));
      await t.flush();
      t.release();
    }
    await prompts.complete(claim!);
    const parked = await partials.takeOver(ids[1]!, PARKED_OWNER, { from: 'ro-old' });
    if (parked.status === 'taken') parked.trajectory.release();
    await prompts.returnSamples({ groupId: claim!.groupId, samples: [1] });

    const tasks = await claimAsNewRollout(job, prompts, partials, writer);
    expect(tasks.map((t) => [t.trajectoryId, t.weightVersion])).toEqual([[ids[1], 2]]);

    // The log now holds only the new start: version 2, owned by ro-new, no tokens.
    expect(await partials.startOf(ids[1]!)).toEqual({ start: expect.objectContaining({ weightVersion: 2, sampleIndex: 1 }) as unknown, owner: 'ro-new' });
    const state = (await partials.read(ids[1]!))!;
    expect(state.tokens.length).toBe(0);
    const jsm = (partials as unknown as { jsm: JetStreamManager }).jsm;
    const subject = partials.names.subject(ids[1]!);
    expect((await jsm.streams.info(partials.names.stream, { subjects_filter: subject })).state.subjects?.[subject]).toBe(1);
    expect(await metricValue(registry, 'laminar_partial_restarts_total')).toBe(1);
    // Sample 0 was not returned: it stays ro-old's, with its tokens, for failover to resume.
    expect((await partials.read(ids[0]!))!).toMatchObject({ owner: 'ro-old', state: 'delta' });
    expect((await prompts.progress()).leased).toBe(0);
  });

  it('a sample trained on after its rollout died between record and purge is not generated again', async () => {
    const job = 'returned2';
    await fx.publish(MODEL, 1);

    const { prompts, writer, partials } = await poolsOf(job);

    // ro-old started both samples and finished sample 1: its log marked 'completing', its
    // record written, and then the rollout was killed before the log's purge.
    const [claim] = await prompts.claim('ro-old', 1);
    const ids = [0, 1].map((i) => trajectoryIdOf(claim!.groupId, i));
    const logs = [];
    for (const [i, trajectoryId] of ids.entries()) {
      logs.push(await partials.start('ro-old', { trajectoryId, promptId: 'q0', groupId: claim!.groupId, sampleIndex: i, groupSize: 2, weightVersion: 1 }));
    }
    await prompts.complete(claim!);
    await logs[1]!.mark('completing');
    await writer.write(trajectory({ id: ids[1]!, promptId: 'q0', groupId: claim!.groupId, sampleIndex: 1, groupSize: 2, weightVersion: 1 }));
    for (const t of logs) t.release();

    // A consuming trainer trains on the record: it leaves the buffer.
    const sampler = await ExperienceSampler.open({ nc: services.nc, buffer: job, batchSize: 1, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    const batch = await sampler.sample({ timeoutMs: 10_000 });
    expect(batch.items.map((i) => i.id)).toEqual([ids[1]]);
    batch.release();
    await sampler.flush();
    const jsm = (partials as unknown as { jsm: JetStreamManager }).jsm;
    expect(await jsm.direct.getMessage(writer.names.stream, { last_by_subj: writer.names.recordSubject(ids[1]!) })).toBeNull();

    // The manager finds the left-behind log: completed, not returned to the prompt pool.
    expect(await partials.takeOver(ids[1]!, PARKED_OWNER, { from: 'ro-old' })).toEqual({ status: 'completed' });
    expect(await partials.read(ids[1]!)).toBeUndefined();

    // Returned anyway (as a restarted rollout of another version does, before the log is found),
    // beside sample 0, parked and returned by the manager: the rollout that claims them starts
    // sample 0 again and skips sample 1.
    const parked = await partials.takeOver(ids[0]!, PARKED_OWNER, { from: 'ro-old' });
    if (parked.status === 'taken') parked.trajectory.release();
    await prompts.returnSamples({ groupId: claim!.groupId, samples: [0, 1] });
    const tasks = await claimAsNewRollout(job, prompts, partials, writer);
    expect(tasks.map((t) => t.trajectoryId)).toEqual([ids[0]]);
    expect(await partials.read(ids[1]!)).toBeUndefined();
    expect(await writer.has(ids[1]!)).toBe(true);
  });
});
