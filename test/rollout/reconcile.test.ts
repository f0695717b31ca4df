/**
 * A rollout's reconciliation: trajectories the partial pool says it owns but it does not
 * generate are resumed. The first round reads the pool (what an earlier process under the same
 * id left); later rounds read only the trajectories this process may own, one direct read each,
 * so that a thousand rollouts do not each read the whole pool every 15 s. Real nats-server,
 * redis-server and relay process.
 */
import { describe, expect, it, vi } from 'vitest';
import { Registry } from 'prom-client';
import { ExperienceWriter, PARKED_OWNER, PartialPool, PromptPool } from '../../src/data/index.js';
import type { RolloutEngine } from '../../src/rollout/engine.js';
import { RolloutClient } from '../../src/rollout/rollout-client.js';
import { trajectoryIdOf } from '../../src/rollout/ids.js';
import type { GenerationTask } from '../../src/rollout/task.js';
import { metricValue, servicesFixture, trajectory } from '../data/helpers.js';
import { inertEngine } from '../helpers/engine.js';
import { relayEachTest } from '../helpers/relay.js';

const MODEL = 'org/reconcile';
const services = servicesFixture();
const fx = relayEachTest();

describe('rollout reconciliation', () => {
  const { closers } = fx;

  it('adopts what an earlier process left, then picks up a stranded hand-over without reading the whole pool again', async () => {
    const job = 'reconcile1';
    await fx.publish(MODEL, 3);
    const registry = new Registry();
    const prompts = await PromptPool.open({ redis: services.redis, name: job });
    await prompts.load([{ id: 'q0', payload: { text: 'q' }, n: 2 }]);
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: job, groups: prompts });
    const partials = await PartialPool.open({ nc: services.nc, pool: job, writer });
    closers.push(() => partials.close());
    const start = (i: number) => ({ trajectoryId: `t-${i}`, promptId: `p${i}`, groupId: `g${i}`, sampleIndex: 0, groupSize: 1, weightVersion: 3 });
    // An earlier process under this id left one trajectory; 40 belong to other rollouts.
    const left = await partials.start('ro-r', start(0));
    left.append(Int32Array.of(5, 6), Float32Array.of(-1, -1));
    await left.flush();
    left.release();
    for (let i = 1; i <= 40; i++) (await partials.start(`ro-other-${i % 4}`, start(i))).release();

    const resumed: string[] = [];
    const engine: RolloutEngine = {
      ...inertEngine(),
      resume: (tasks: GenerationTask[]) => {
        resumed.push(...tasks.map((t) => t.trajectoryId));
        return Promise.resolve();
      },
    };
    const list = vi.spyOn(partials, 'list');
    const summary = vi.spyOn(partials, 'summary');
    const rollout = await RolloutClient.connect({
      nc: services.nc,
      job,
      id: 'ro-r',
      model: MODEL,
      engine,
      prompts,
      partials,
      writer,
      relaySocket: fx.relay.socketPath,
      reconcileMs: 150,
      registry,
    });
    closers.push(() => rollout.close());
    const weights = await rollout.acquireWeights();
    await weights.lease.release();

    // Seen stray in two rounds in a row, then resumed with its tokens.
    await expect.poll(() => resumed, { timeout: 10_000 }).toEqual(['t-0']);
    expect(rollout.owned.get('t-0')!.generated).toBe(2);
    expect(list).toHaveBeenCalledTimes(1);

    // A trajectory handed over (a repack-out) whose destination never took it: still this
    // rollout's in the pool, so it comes back here.
    const [task] = await rollout.claim(1);
    task!.append(Int32Array.of(1, 2, 3), Float32Array.of(-1, -1, -1));
    await task!.flush();
    task!.handOver();
    expect(rollout.owned.has(task!.trajectoryId)).toBe(false);
    await expect.poll(() => resumed, { timeout: 10_000 }).toEqual(['t-0', task!.trajectoryId]);
    expect(rollout.owned.get(task!.trajectoryId)!.generated).toBe(3);
    expect(await metricValue(registry, 'laminar_rollout_tasks_total', { outcome: 'reconciled' })).toBe(2);

    // Several rounds on, the pool was still read once: every later round read only what this
    // rollout may own and does not generate (the two strays until they were resumed; then
    // nothing), never the other rollouts' 40.
    const reads = summary.mock.calls.length;
    await new Promise((r) => setTimeout(r, 600));
    expect(list).toHaveBeenCalledTimes(1);
    expect(summary.mock.calls.length).toBe(reads);
    expect(new Set(summary.mock.calls.map(([id]) => id))).toEqual(new Set(['t-0', task!.trajectoryId]));
  });

  it('finishes what an earlier process left half-completed: purged if its record landed, its sample returned if not', async () => {
    const job = 'reconcile3';
    await fx.publish(MODEL, 3);
    const registry = new Registry();
    const prompts = await PromptPool.open({ redis: services.redis, name: job });
    await prompts.load([{ id: 'q0', payload: { text: 'q' }, n: 2 }]);
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: job, groups: prompts });
    // No grace: the earlier process is gone, its writes can no longer land (partial-completing.test.ts covers the grace).
    const partials = await PartialPool.open({ nc: services.nc, pool: job, writer, completingGraceMs: 0 });
    closers.push(() => partials.close());
    // An earlier 'ro-c' was killed while completing both samples of a group: the record of
    // sample 0 ('landed') was written, the one of sample 1 ('unwritten') was not; both logs end
    // in their 'completing' marker.
    const [claim] = await prompts.claim('ro-c', 1);
    const [landed, unwritten] = [0, 1].map((i) => trajectoryIdOf(claim!.groupId, i)) as [string, string];
    for (const [i, trajectoryId] of [landed, unwritten].entries()) {
      const t = await partials.start('ro-c', { trajectoryId, promptId: 'q0', groupId: claim!.groupId, sampleIndex: i, groupSize: 2, weightVersion: 3 });
      t.append(Int32Array.of(7, 8), Float32Array.of(-1, -1));
      await t.mark('completing');
      t.release();
    }
    await prompts.complete(claim!);
    await writer.write(trajectory({ id: landed, promptId: 'q0', groupId: claim!.groupId, sampleIndex: 0, groupSize: 2, weightVersion: 3 }));
    expect((await partials.summary(landed))!.state).toBe('completing');

    const resumed: string[] = [];
    const engine: RolloutEngine = {
      ...inertEngine(),
      resume: (tasks: GenerationTask[]) => {
        resumed.push(...tasks.map((t) => t.trajectoryId));
        return Promise.resolve();
      },
    };
    const rollout = await RolloutClient.connect({
      nc: services.nc,
      job,
      id: 'ro-c',
      model: MODEL,
      engine,
      prompts,
      partials,
      writer,
      relaySocket: fx.relay.socketPath,
      reconcileMs: 150,
      registry,
    });
    closers.push(() => rollout.close());
    const weights = await rollout.acquireWeights();
    await weights.lease.release();

    // Left alone, both would wait in the pool for ever (this id is alive, so the manager leaves
    // them to it), until a take-over long after the completion mark of 'landed' had expired
    // generated it a second time. 'unwritten' is finished (its response whole, its reward not in
    // the log): resumed, it would be generated past its end; its sample goes back instead.
    await expect.poll(() => metricValue(registry, 'laminar_rollout_tasks_total', { outcome: 'returned' }), { timeout: 10_000 }).toBe(1);
    await expect.poll(() => partials.summary(landed), { timeout: 10_000 }).toBeUndefined();
    expect(resumed).toEqual([]);
    expect((await partials.summary(unwritten))?.owner).toBe(PARKED_OWNER);
    expect(await writer.has(landed)).toBe(true);
    expect(await writer.has(unwritten)).toBe(false);
    expect(await metricValue(registry, 'laminar_rollout_tasks_total', { outcome: 'reconciled' })).toBe(0);
    const [again] = await prompts.claim('ro-next', 1);
    expect(again).toMatchObject({ groupId: claim!.groupId, returned: true, samples: [1] });
  });

  it('forgets a handed-over trajectory once its destination holds it', async () => {
    const job = 'reconcile2';
    await fx.publish(MODEL, 1);
    const prompts = await PromptPool.open({ redis: services.redis, name: job });
    await prompts.load([{ id: 'q0', payload: { text: 'q' }, n: 1 }]);
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: job, groups: prompts });
    const partials = await PartialPool.open({ nc: services.nc, pool: job, writer });
    closers.push(() => partials.close());
    const summary = vi.spyOn(partials, 'summary');
    const rollout = await RolloutClient.connect({
      nc: services.nc,
      job,
      id: 'ro-src',
      model: MODEL,
      engine: inertEngine(),
      prompts,
      partials,
      writer,
      relaySocket: fx.relay.socketPath,
      reconcileMs: 150,
    });
    closers.push(() => rollout.close());
    const weights = await rollout.acquireWeights();
    await weights.lease.release();
    const [task] = await rollout.claim(1);
    await task!.flush();
    task!.handOver();
    const taken = await partials.takeOver(task!.trajectoryId, 'ro-dst', { from: 'ro-src' });
    if (taken.status === 'taken') taken.trajectory.release();
    // Read once after the take-over, seen to be another's, and never read again.
    await expect.poll(() => summary.mock.calls.length, { timeout: 10_000 }).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 600));
    const reads = summary.mock.calls.length;
    await new Promise((r) => setTimeout(r, 600));
    expect(summary.mock.calls.length).toBe(reads);
    expect((await partials.summary(task!.trajectoryId))!.owner).toBe('ro-dst');
  });
});
