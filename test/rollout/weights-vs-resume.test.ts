/**
 * A rollout's weight version and the trajectories it resumes never get out of step (a trajectory
 * keeps one version from its first token to its last), whichever of the two comes first: an
 * acquire asked for while a repack-in is resuming trajectories waits for it and then refuses
 * (the engine has work of the old version), and a repack-in that arrives while new weights are
 * being loaded is refused. Real nats-server, redis-server and relay process.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SCHEMA_VERSION, commandReplySchema, decode, encode } from '../../src/control/schema.js';
import { controlNames } from '../../src/control/subjects.js';
import { ExperienceWriter, PartialPool, PromptPool } from '../../src/data/index.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { RolloutClient } from '../../src/rollout/rollout-client.js';
import type { GenerationTask } from '../../src/rollout/task.js';
import { servicesFixture } from '../data/helpers.js';
import { inertEngine } from '../helpers/engine.js';
import { metricValue, metricsText, spawnRelay, publishVisible, tempShmDir, type RelayProcess } from '../helpers/relay.js';

/** Until the relay counts `n` acquires waiting for a version that has not arrived. */
async function acquiresWaiting(relay: RelayProcess, n: number): Promise<void> {
  await vi.waitFor(async () => expect(metricValue(await metricsText(relay.metricsPort), 'laminar_relay_acquires_waiting')).toBe(n), { timeout: 10_000 });
}

const MODEL = 'org/stepped';
const weights = (v: number) => [{ name: 'w', dtype: 'F32' as const, shape: [256], data: new Float32Array(256).fill(v) }];

const services = servicesFixture();

describe('rollout: weight changes and resumes do not overlap', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let relay: RelayProcess;
  let job: string;
  let partials: PartialPool;
  let rollout: RolloutClient | null;
  let jobs = 0;

  beforeEach(async () => {
    tmp = tempShmDir();
    relay = await spawnRelay(tmp.dir, ['--no-pin', '--keep-versions', '3']);
    job = `stepped${jobs++}`;
    rollout = null;
  });
  afterEach(async () => {
    await rollout?.close();
    await (partials as PartialPool | undefined)?.close(); // unset when the test failed before opening it
    await relay.stop('SIGKILL');
    tmp.cleanup();
  });

  async function publish(version: number): Promise<void> {
    const trainer = await RelayClient.connect({ socketPath: relay.socketPath, reconnect: false });
    await publishVisible(trainer, { model: MODEL, version, tensors: weights(version) });
    trainer.close();
  }

  /** Two trajectories of version 1 owned by `owner` ('ro-src' unless told), and the rollout under test ('ro-dst'). */
  async function setUp(engine = inertEngine(), owner = 'ro-src'): Promise<{ ids: string[]; subject: string }> {
    const prompts = await PromptPool.open({ redis: services.redis, name: job });
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: job, groups: prompts });
    partials = await PartialPool.open({ nc: services.nc, pool: job, writer });
    const ids = ['g/0', 'g/1'];
    for (const [i, trajectoryId] of ids.entries()) {
      const t = await partials.start(owner, {
        trajectoryId,
        promptId: 'p',
        groupId: 'g',
        sampleIndex: i,
        groupSize: 2,
        weightVersion: 1,
        promptTokens: new Uint8Array(Int32Array.of(5, 6).buffer),
      });
      t.append(Int32Array.of(1, 2), Float32Array.of(-0.5, -0.5));
      await t.flush();
      t.release();
    }
    rollout = await RolloutClient.connect({
      nc: services.nc,
      job,
      id: 'ro-dst',
      model: MODEL,
      engine,
      prompts,
      partials,
      writer,
      relaySocket: relay.socketPath,
      reconcileMs: 0,
    });
    return { ids, subject: controlNames(job).member('ro-dst') };
  }

  function repackIn(subject: string, ids: string[]) {
    return services.nc
      .request(subject, encode({ v: SCHEMA_VERSION, t: 'repack-in', repack: 'r1', from: 'ro-src', version: 1, trajectories: ids }), { timeout: 10_000 })
      .then((msg) => decode(commandReplySchema, msg.data, 'reply'));
  }

  it('an acquire asked for during a repack-in waits for it, then refuses: the resumed trajectories come first', async () => {
    let entered!: () => void;
    const resumeEntered = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const resumed: GenerationTask[] = [];
    const engine = {
      ...inertEngine(),
      resume: async (tasks: readonly GenerationTask[]) => {
        resumed.push(...tasks);
        entered();
        await gate;
      },
    };
    await publish(1);
    const { ids, subject } = await setUp(engine);
    const first = await rollout!.acquireWeights();
    expect(first.version).toBe(1);
    await first.lease.release();
    await publish(2);

    const reply = repackIn(subject, ids);
    await resumeEntered;
    const acquiring = rollout!.acquireWeights().then(
      () => 'acquired',
      (err: unknown) => (err as { code?: string }).code,
    );
    release();
    expect(await reply).toMatchObject({ t: 'done', taken: 2 });
    expect(await acquiring).toBe('ERR_ROLLOUT_BUSY');
    expect(rollout!.version).toBe(1);
    expect(resumed.map((t) => t.weightVersion)).toEqual([1, 1]);
    expect(rollout!.owned.size).toBe(2);
  });

  it('a reinitialise during a load resumes only what matches the new weights', async () => {
    await publish(1);
    // The trajectories are ro-dst's own: after a reinitialise it resumes what the partial pool says it owns.
    const { subject } = await setUp(inertEngine(), 'ro-dst');
    const first = await rollout!.acquireWeights();
    await first.lease.release();
    const acquiring = rollout!.acquireWeights({ atLeast: 2, timeoutMs: 10_000 });
    await acquiresWaiting(relay, 1);
    const reply = services.nc
      .request(subject, encode({ v: SCHEMA_VERSION, t: 'reinitialise', reason: 'test' }), { timeout: 10_000 })
      .then((msg) => decode(commandReplySchema, msg.data, 'reply'));
    // The reinitialise has begun (it waits for the load in flight) before version 2 arrives.
    await vi.waitFor(() => expect(rollout!.engineState).toBe('reinitialising'), { timeout: 10_000 });
    await publish(2);
    const second = await acquiring;
    await second.lease.release();
    expect(await reply).toMatchObject({ t: 'done', taken: 0 });
    expect(rollout!.version).toBe(2);
    // Nothing of version 1 is generated with version 2's weights.
    expect([...rollout!.owned.values()].map((t) => t.weightVersion)).toEqual([]);
  });

  it('a repack-in that arrives while new weights are being loaded is refused, and nothing moves', async () => {
    await publish(1);
    const { ids, subject } = await setUp();
    const first = await rollout!.acquireWeights();
    await first.lease.release();
    // Version 2 is not on the relay yet: the acquire waits for it.
    const acquiring = rollout!.acquireWeights({ atLeast: 2, timeoutMs: 10_000 });
    await acquiresWaiting(relay, 1);
    expect(await repackIn(subject, ids)).toMatchObject({ t: 'failed', code: 'ERR_VERSION_MISMATCH' });
    await publish(2);
    const second = await acquiring;
    expect(second.version).toBe(2);
    await second.lease.release();
    expect(rollout!.owned.size).toBe(0);
    expect((await partials.list()).map((s) => s.owner)).toEqual(['ro-src', 'ro-src']);
  });
});
