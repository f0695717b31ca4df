import { beforeEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ExperienceWriter, type TrajectoryInput } from '../../src/data/index.js';
import {
  SimTrainer,
  SimTrainerOptionError,
  parseSimTrainerOptions,
  percentile,
  stampedVersion,
  stepJson,
  removalJson,
  type SimTrainerOptions,
  type SimTrainerStep,
  type WeightPublisher,
  type WeightTensor,
  SyntheticWeights,
} from '../../src/stand-ins/trainer/index.js';
import { metricValue, natsFixture, trajectory } from '../data/helpers.js';
import { createHash } from 'node:crypto';
import { CapacityError, ClosedError } from '../../src/common/errors.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const nats = natsFixture();
let buffer: string;
let n = 0;

beforeEach(() => {
  buffer = `sim${++n}`;
});

/** Counts publishes; `onPublish` runs inside publish() (its time is the stall). */
class FakePublisher implements WeightPublisher {
  readonly versions: number[] = [];
  readonly stamps: number[][] = [];
  readonly buffers = new Set<unknown>();
  tensorCount = 0;
  closed = 0;
  constructor(private readonly onPublish?: (version: number) => Promise<void>) {}
  async publish(version: number, tensors: readonly WeightTensor[]): Promise<{ stallMs: number }> {
    const started = performance.now();
    this.versions.push(version);
    this.stamps.push(tensors.map((t) => stampedVersion(t.data)));
    for (const t of tensors) this.buffers.add(t.data);
    this.tensorCount = tensors.length;
    await this.onPublish?.(version);
    return { stallMs: performance.now() - started };
  }
  close(): Promise<void> {
    this.closed++;
    return Promise.resolve();
  }
}

async function writer(): Promise<ExperienceWriter> {
  return ExperienceWriter.open({ nc: nats.nc, buffer });
}

async function open(over: Partial<SimTrainerOptions> & { publisher: WeightPublisher }): Promise<SimTrainer> {
  return SimTrainer.open({ nc: nats.nc, buffer, size: '64KiB', tensors: 4, trainTime: '20ms', ...over });
}

function collect(trainer: SimTrainer): SimTrainerStep[] {
  const steps: SimTrainerStep[] = [];
  trainer.events.on('step', (s) => steps.push(s));
  return steps;
}

describe('sim-trainer: sample, train, publish', () => {
  it('runs 3 FIFO steps: versions 1..3 in order, full batches, staleness against known versions', async () => {
    const w = await writer();
    // Batch k (FIFO, 4 each) is trained at version k-1.
    const versions = [0, 0, 0, 0, /* v1 */ 0, 0, 1, 1, /* v2 */ 0, 1, 2, 2, /* left over */ 2, 2];
    for (const [i, v] of versions.entries()) await w.write(trajectory({ id: `x${i}`, weightVersion: v }, 8));
    const publisher = new FakePublisher();
    const registry = new Registry();
    const trainer = await open({ publisher, registry, batchSize: 4, steps: 3, trainTime: '1s', timeScale: 20 });
    const steps = collect(trainer);
    const iterated: number[] = [];
    const iterating = (async () => {
      for await (const s of trainer.steps()) iterated.push(s.version);
    })();
    const summary = await trainer.run();
    await iterating;

    expect(summary).toMatchObject({ reason: 'steps', steps: 3, version: 3, trajectories: 12 });
    // Version 0 first (rollouts need weights), then one per step, in order.
    expect(publisher.versions).toEqual([0, 1, 2, 3]);
    expect(publisher.stamps).toEqual([0, 1, 2, 3].map((v) => [v, v, v, v]));
    expect(publisher.tensorCount).toBe(4);
    expect(publisher.buffers.size).toBe(4); // the same 4 buffers for every version
    expect(steps.map((s) => [s.step, s.version, s.trainedOn, s.batch])).toEqual([
      [1, 1, 0, 4],
      [2, 2, 1, 4],
      [3, 3, 2, 4],
    ]);
    expect(iterated).toEqual([1, 2, 3]);
    expect(steps.map((s) => s.staleness)).toEqual([
      { p50: 0, min: 0, max: 0, mean: 0, histogram: { 0: 4 } },
      { p50: 0, min: 0, max: 1, mean: 0.5, histogram: { 0: 2, 1: 2 } },
      { p50: 0, min: 0, max: 2, mean: 0.75, histogram: { 0: 2, 1: 1, 2: 1 } },
    ]);
    // 1 s of simulated training at 20x: about 50 ms of wall clock.
    for (const s of steps) {
      expect(s.trainMs).toBeGreaterThanOrEqual(45);
      expect(s.trainMs).toBeLessThan(1000);
    }
    const line = stepJson(steps[2]!);
    // Every record completed before the trainer's first version: none is inherently stale, however
    // stale it is at training.
    expect(steps.map((s) => s.inherent.histogram)).toEqual([{ 0: 4 }, { 0: 4 }, { 0: 4 }]);
    expect(Object.keys(line)).toEqual(['step', 'version', 'batch', 'sample_ms', 'train_ms', 'publish_stall_ms', 'staleness', 'inherent']);
    expect(line).toMatchObject({
      step: 3,
      version: 3,
      batch: 4,
      staleness: { p50: 0, max: 2, mean: 0.75, histogram: { 0: 2, 1: 1, 2: 1 } },
      inherent: { histogram: { 0: 4 } },
    });
    expect(JSON.parse(JSON.stringify(line))).toEqual(line);

    // Stopped cleanly: publisher and sampler closed, the caller's connection left open.
    expect(publisher.closed).toBe(1);
    await expect(trainer.sampler.sample({ timeoutMs: 10 })).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    expect(nats.nc.isClosed()).toBe(false);
    expect(trainer.running).toBe(false);
    await trainer.close(); // idempotent
    expect(publisher.closed).toBe(1);

    expect(await metricValue(registry, 'laminar_sim_trainer_steps_total')).toBe(3);
    expect(await metricValue(registry, 'laminar_sim_trainer_version')).toBe(3);
    expect(await metricValue(registry, 'laminar_sim_trainer_trajectories_total')).toBe(12);
    expect(await metricValue(registry, 'laminar_sim_trainer_publishes_total', { kind: 'step' })).toBe(3);
    expect(await metricValue(registry, 'laminar_sim_trainer_publishes_total', { kind: 'initial' })).toBe(1);
    const text = await registry.metrics();
    expect(text).toMatch(/laminar_sim_trainer_staleness_count 12/);
    expect(text).toMatch(/laminar_sim_trainer_inherent_staleness_count 12/);
    expect(text).toMatch(/laminar_sim_trainer_sample_wait_seconds_count 3/);
  });

  it("reports inherent staleness from the trainer's version when each trajectory completed", async () => {
    const w = await writer();
    for (let i = 0; i < 2; i++) await w.write(trajectory({ id: `a${i}`, weightVersion: 0 }, 8));
    const publisher = new FakePublisher();
    const trainer = await open({ publisher, batchSize: 2, steps: 2, trainTime: '1s', timeScale: 20 });
    const steps = collect(trainer);
    // Completed once v1 is the trainer's, generated with v0: inherently 1 version stale.
    trainer.events.on('published', (p: { version: number }) => {
      if (p.version !== 1) return;
      const at = Date.now() + 1;
      void (async () => {
        for (let i = 0; i < 2; i++) await w.write(trajectory({ id: `b${i}`, weightVersion: 0, completedAt: at }, 8));
      })();
    });
    await trainer.run();
    expect(steps.map((s) => [s.trainedOn, s.staleness.max, s.inherent.histogram])).toEqual([
      [0, 0, { 0: 2 }],
      [1, 1, { 1: 2 }],
    ]);
  });

  it('goes on training when the master refuses a version for lack of room, and offers the next one; other failures still end the run', async () => {
    const w = await writer();
    for (let i = 0; i < 12; i++) await w.write(trajectory({ id: `full${i}`, weightVersion: 0 }, 8));
    const publisher = new FakePublisher((version) =>
      version === 1 ? Promise.reject(new CapacityError(ErrorCodes.MEMORY_BUDGET, 'publishing would exceed the memory budget')) : Promise.resolve(),
    );
    const registry = new Registry();
    const trainer = await open({ publisher, registry, batchSize: 4, steps: 3 });
    const published: number[] = [];
    trainer.events.on('published', (p) => published.push(p.version));
    const steps = collect(trainer);
    const summary = await trainer.run();
    expect(summary).toMatchObject({ reason: 'steps', steps: 3, version: 3 });
    // (v1 may be offered again, and refused again, if a batch takes over a second to come.)
    expect([...new Set(publisher.versions)]).toEqual([0, 1, 2, 3]);
    // v1 was refused: not announced as published, counted, and the step still trained.
    expect(published).toEqual([0, 2, 3]);
    expect(steps.map((s) => s.version)).toEqual([1, 2, 3]);
    expect(await metricValue(registry, 'laminar_sim_trainer_publish_refused_total', { kind: 'step' })).toBe(1);

    const broken = new FakePublisher((version) => (version === 1 ? Promise.reject(new ClosedError('the master went away')) : Promise.resolve()));
    for (let i = 0; i < 4; i++) await w.write(trajectory({ id: `more${i}`, weightVersion: 3 }, 8));
    const failing = await open({ publisher: broken, batchSize: 4, steps: 3 });
    await expect(failing.run()).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });

  it('offers a refused version again while it waits, so rollouts held on the old weights cannot starve a staleness-bounded trainer', async () => {
    const w = await writer();
    for (let i = 0; i < 4; i++) await w.write(trajectory({ id: `a${i}`, weightVersion: 0 }, 8));
    let refusals = 2;
    const publisher = new FakePublisher((version) =>
      version === 1 && refusals-- > 0
        ? Promise.reject(new CapacityError(ErrorCodes.MEMORY_BUDGET, 'publishing would exceed the memory budget'))
        : Promise.resolve(),
    );
    const registry = new Registry();
    // --max-staleness 0: once the trainer is at v1, only data generated with v1 trains, and rollouts
    // (this test) generate with v1 only once they can have it, i.e. once it is published.
    const trainer = await open({ publisher, registry, batchSize: 4, steps: 2, maxStaleness: 0 });
    const published: [number, string][] = [];
    trainer.events.on('published', (p) => {
      published.push([p.version, p.kind]);
      if (p.version === 1) void Promise.all([0, 1, 2, 3].map((i) => w.write(trajectory({ id: `b${i}`, weightVersion: 1 }, 8))));
    });
    const summary = await trainer.run();
    expect(summary).toMatchObject({ reason: 'steps', steps: 2, version: 2 });
    expect(published).toEqual([
      [0, 'initial'],
      [1, 'retry'],
      [2, 'step'],
    ]);
    expect(publisher.versions).toEqual([0, 1, 1, 1, 2]);
    expect(await metricValue(registry, 'laminar_sim_trainer_publish_refused_total', { kind: 'step' })).toBe(1);
    expect(await metricValue(registry, 'laminar_sim_trainer_publish_refused_total', { kind: 'retry' })).toBe(1);
    expect(await metricValue(registry, 'laminar_sim_trainer_publishes_total', { kind: 'retry' })).toBe(1);
  });

  it('reports every trajectory it removes from the buffer, trained on or too stale: the --removals lines', async () => {
    const w = await writer();
    // Written at version 0; the trainer starts at 5 with --max-staleness 2: s0..s3 are stale, x0..x3 fresh.
    for (let i = 0; i < 4; i++) await w.write(trajectory({ id: `s${i}`, weightVersion: 0 }, 8));
    for (let i = 0; i < 4; i++) await w.write(trajectory({ id: `x${i}`, weightVersion: 5 }, 8));
    const removals: ReturnType<typeof removalJson>[] = [];
    const trainer = await open({
      publisher: new FakePublisher(),
      batchSize: 4,
      steps: 1,
      startVersion: 5,
      maxStaleness: 2,
      sampler: {
        onEvict: (entries, reason) => removals.push(removalJson(entries, reason)),
      },
    });
    const trained: string[] = [];
    trainer.events.on('sampled', ({ batch }) => trained.push(...batch.items.map((t) => t.id)));
    await trainer.run();
    const byReason = (reason: string): string[] =>
      removals
        .filter((r) => r.removed === reason)
        .flatMap((r) => r.ids)
        .sort();
    expect(byReason('stale')).toEqual(['s0', 's1', 's2', 's3']);
    expect(trained.sort()).toEqual(['x0', 'x1', 'x2', 'x3']);
    expect(byReason('sampled')).toEqual(trained);
    expect(JSON.parse(JSON.stringify(removals[0]))).toEqual(removals[0]);
  });

  it("publishedChecksum is the SHA-256 of the published version's bytes, tensors in order", async () => {
    const publisher = new FakePublisher();
    const trainer = await open({ publisher, batchSize: 4, steps: 1 });
    const sums = new Map<number, string>();
    trainer.events.on('published', (p) => sums.set(p.version, trainer.publishedChecksum()));
    const w = await writer();
    for (let i = 0; i < 4; i++) await w.write(trajectory({ id: `sum${i}`, weightVersion: 0 }, 8));
    await trainer.run();
    const expected = (version: number): string => {
      const weights = new SyntheticWeights(64 * 1024, 4);
      const hash = createHash('sha256');
      for (const t of weights.stamp(version)) hash.update(t.data as Uint8Array);
      return hash.digest('hex');
    };
    expect([...sums.keys()]).toEqual([0, 1]);
    expect(sums.get(0)).toBe(expected(0));
    expect(sums.get(1)).toBe(expected(1));
    expect(sums.get(0)).not.toBe(sums.get(1));
  });

  it('samples whole GRPO groups written by a concurrent rollout, one version behind', async () => {
    const w = await writer();
    let g = 0;
    // Each publish of version v makes the "rollouts" write 2 groups of 4 generated with v-1
    // (interleaved members), before the publish returns.
    const publisher = new FakePublisher(async (version) => {
      const gen = Math.max(0, version - 1);
      const groups = [`g${++g}`, `g${++g}`];
      const ts: TrajectoryInput[] = [];
      for (let i = 0; i < 4; i++)
        for (const gid of groups) ts.push(trajectory({ id: `${gid}-${i}`, groupId: gid, promptId: gid, sampleIndex: i, groupSize: 4, weightVersion: gen }, 6));
      for (const t of ts) await w.write(t);
    });
    const trainer = await open({ publisher, batchSize: 8, strategy: 'groups', steps: 3 });
    const batches: Array<Array<{ groupId: string; sampleIndex: number }>> = [];
    const steps = collect(trainer);
    trainer.events.on('sampled', ({ batch }) => batches.push(batch.items.map((i) => ({ groupId: i.groupId, sampleIndex: i.sampleIndex }))));
    const summary = await trainer.run();
    expect(summary).toMatchObject({ reason: 'steps', steps: 3, version: 3 });
    expect(publisher.versions).toEqual([0, 1, 2, 3]);
    expect(steps.map((s) => [s.batch, s.groups, s.staleness.max, s.staleness.mean])).toEqual([
      [8, 2, 0, 0],
      [8, 2, 1, 1],
      [8, 2, 1, 1],
    ]);
    for (const b of batches) {
      expect(b).toHaveLength(8);
      const byGroup = new Map<string, number[]>();
      for (const it of b) byGroup.set(it.groupId, [...(byGroup.get(it.groupId) ?? []), it.sampleIndex]);
      expect([...byGroup.values()].map((v) => v.sort())).toEqual([
        [0, 1, 2, 3],
        [0, 1, 2, 3],
      ]);
    }
  });
});

describe('sim-trainer: stopping', () => {
  it('stop() while waiting for data ends the run at once, cleanly', async () => {
    const publisher = new FakePublisher();
    const trainer = await open({ publisher, batchSize: 4 });
    const phases: string[] = [];
    trainer.events.on('phase', (p) => {
      phases.push(p.phase);
      if (p.phase === 'sampling') setTimeout(() => void trainer.stop(), 100);
    });
    const stopped = new Promise((resolve) => trainer.events.once('stopped', resolve));
    const started = performance.now();
    const summary = await trainer.run();
    expect(performance.now() - started).toBeLessThan(3000);
    expect(summary).toMatchObject({ reason: 'stopped', steps: 0, version: 0 });
    expect(await stopped).toEqual(summary);
    expect(phases).toEqual(['sampling']);
    expect(publisher.versions).toEqual([0]);
    expect(publisher.closed).toBe(1);
    await expect(trainer.run()).resolves.toEqual(summary);
  });

  it('stop() during training finishes the step; stop({ abortStep }) abandons it', async () => {
    const w = await writer();
    for (let i = 0; i < 8; i++) await w.write(trajectory({ id: `s${i}` }, 6));
    const graceful = new FakePublisher();
    const t1 = await open({ publisher: graceful, batchSize: 4, trainTime: '300ms' });
    t1.events.on('phase', (p) => {
      if (p.phase === 'training') void t1.stop();
    });
    expect(await t1.run()).toMatchObject({ reason: 'stopped', steps: 1, version: 1 });
    expect(graceful.versions).toEqual([0, 1]);

    const abrupt = new FakePublisher();
    const t2 = await open({ publisher: abrupt, batchSize: 4, trainTime: '30s', startVersion: 5 });
    t2.events.on('phase', (p) => {
      if (p.phase === 'training') void t2.stop({ abortStep: true });
    });
    const started = performance.now();
    expect(await t2.run()).toMatchObject({ reason: 'stopped', steps: 0, version: 5 });
    expect(performance.now() - started).toBeLessThan(5000);
    expect(abrupt.versions).toEqual([5]);
    expect(abrupt.closed).toBe(1);
  });

  it('--duration stops the run (wall clock), and errors end it with their code', async () => {
    const publisher = new FakePublisher();
    const trainer = await open({ publisher, batchSize: 4, duration: '300ms', initialPublish: false });
    expect(await trainer.run()).toMatchObject({ reason: 'duration', steps: 0 });
    expect(publisher.versions).toEqual([]);

    const failing: WeightPublisher = {
      publish: (v) =>
        v > 0 ? Promise.reject(Object.assign(new Error('version 1 is older than the newest'), { code: 'ERR_VERSION_STALE' })) : Promise.resolve({ stallMs: 0 }),
      close: () => Promise.resolve(),
    };
    const w = await writer();
    for (let i = 0; i < 4; i++) await w.write(trajectory({ id: `f${i}` }, 6));
    const t2 = await open({ publisher: failing, batchSize: 4, steps: 5 });
    const ended = new Promise<{ reason: string }>((resolve) => t2.events.once('stopped', resolve));
    await expect(t2.run()).rejects.toMatchObject({ code: 'ERR_VERSION_STALE' });
    expect((await ended).reason).toBe('error');
  });
});

describe('sim-trainer: options', () => {
  const bad: Array<[Record<string, unknown>, string]> = [
    [{ batchSize: 0 }, 'batch-size'],
    [{ batchSize: '1.5' }, 'batch-size'],
    [{ strategy: 'lifo' }, 'strategy'],
    [{ size: 'lots' }, 'size'],
    [{ size: 1001 }, 'size'],
    [{ size: 16, tensors: 8 }, 'size'],
    [{ tensors: 0 }, 'tensors'],
    [{ trainTime: 'soon' }, 'train-time'],
    [{ timeScale: 0 }, 'time-scale'],
    [{ timeScale: 'fast' }, 'time-scale'],
    [{ steps: -1 }, 'steps'],
    [{ duration: '0s' }, 'duration'],
    [{ maxStaleness: -2 }, 'max-staleness'],
    [{ startVersion: 'v1' }, 'start-version'],
    [{ buffer: 'no spaces' }, 'buffer'],
    [{ replicas: 9 }, 'replicas'],
  ];
  it.each(bad)('rejects %j with ERR_INVALID_ARG naming the flag', (input, option) => {
    let caught: unknown;
    try {
      parseSimTrainerOptions(input);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(SimTrainerOptionError);
    expect(caught).toMatchObject({ code: 'ERR_INVALID_ARG', details: { option } });
    expect((caught as Error).message).toContain(`--${option}`);
  });

  it('rejects a bad model id, and options before connecting anything', async () => {
    expect(() => parseSimTrainerOptions({ model: '' })).toThrow(expect.objectContaining({ code: 'ERR_BAD_MODEL_ID' }));
    const publisher = new FakePublisher();
    // No connection given: the option error comes first.
    await expect(SimTrainer.open({ publisher, strategy: 'lifo' })).rejects.toMatchObject({ code: 'ERR_INVALID_ARG', details: { option: 'strategy' } });
    await expect(SimTrainer.open({ publisher })).rejects.toMatchObject({ code: 'ERR_INVALID_ARG', details: { option: 'nats' } });
  });

  it('has the documented defaults and scales the training time', () => {
    expect(parseSimTrainerOptions({})).toMatchObject({
      model: 'sim/policy',
      sizeBytes: 64 * 1024 * 1024,
      tensors: 8,
      batchSize: 64,
      strategy: 'fifo',
      maxStaleness: null,
      trainTimeMs: 2000,
      timeScale: 1,
      trainWallMs: 2000,
      steps: null,
      durationMs: null,
      startVersion: 0,
      initialPublish: true,
      buffer: 'default',
    });
    expect(parseSimTrainerOptions({ trainTime: '2s', timeScale: '10' }).trainWallMs).toBe(200);
    expect(percentile({ 0: 2, 1: 1, 2: 1 }, 0.5)).toBe(0);
    expect(percentile({ 3: 1, 5: 2 }, 0.5)).toBe(5);
    expect(percentile({}, 0.5)).toBe(0);
  });
});
