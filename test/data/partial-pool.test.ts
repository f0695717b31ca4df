import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { ExperienceSampler, ExperienceWriter, PartialPool, partialNames, type PartialStart } from '../../src/data/index.js';
import type { TrajectoryInput } from '../../src/data/codec/trajectory.js';
import { heldWriter, metricValue, natsFixture, trajectory } from './helpers.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const nats = natsFixture();
let registry: Registry;
let k = 0;
let name: string;
const closers: Array<() => Promise<void>> = [];

afterAll(async () => {
  for (const c of closers) await c();
});
beforeEach(() => {
  registry = new Registry();
  name = `pp${++k}`;
});

async function pool(over: { flushTokens?: number; flushMs?: number; writer?: ExperienceWriter; completingGraceMs?: number } = {}): Promise<PartialPool> {
  const p = await PartialPool.open({
    nc: nats.nc,
    pool: name,
    registry,
    flushTokens: over.flushTokens ?? 4,
    flushMs: over.flushMs ?? 60_000,
    writer: over.writer,
    completingGraceMs: over.completingGraceMs,
  });
  closers.push(() => p.close());
  return p;
}
const start = (id: string): PartialStart => ({ trajectoryId: id, promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, weightVersion: 3 });
const range = (a: number, b: number): number[] => Array.from({ length: b - a }, (_, i) => a + i);

describe('PartialPool', () => {
  it('streams tokens every K tokens and reads them back exactly', async () => {
    const p = await pool({ flushTokens: 4 });
    const t = await p.start('r1', start('traj-1'));
    t.append([1, 2, 3], [-0.1, -0.2, -0.3]); // below K: buffered only
    expect((await p.read('traj-1'))!.tokens.length).toBe(0);
    t.append([4, 5], [-0.4, -0.5]); // K reached: flushed
    await t.flush();
    const s = (await p.read('traj-1'))!;
    expect(Array.from(s.tokens)).toEqual([1, 2, 3, 4, 5]);
    expect(s.logprobs[4]).toBeCloseTo(-0.5);
    expect(s).toMatchObject({ owner: 'r1', start: { trajectoryId: 'traj-1', weightVersion: 3, sampleIndex: 0 } });
    expect(await metricValue(registry, 'laminar_partial_appends_total')).toBe(1);
  });

  it('leaves no consumer behind on nats-server after reads and listings', async () => {
    const p = await pool({ flushTokens: 2 });
    const t = await p.start('r1', start('no-leftovers'));
    t.append([1, 2, 3], [-1, -2, -3]);
    await t.flush();
    const jsm = await jetstreamManager(nats.nc);
    const stream = partialNames(name).stream;
    const before = (await jsm.streams.info(stream)).state.consumer_count;
    for (let i = 0; i < 5; i++) {
      expect((await p.read('no-leftovers'))!.tokens.length).toBe(3);
      expect(await p.read('never-started')).toBeUndefined();
      expect((await p.list()).map((s) => s.trajectoryId)).toContain('no-leftovers');
    }
    // Each read used an ordered consumer; left behind, each would live on for 5 minutes.
    expect((await jsm.streams.info(stream)).state.consumer_count).toBe(before);
  });

  it("reads a trajectory's start and current owner without its log", async () => {
    const p = await pool({ flushTokens: 2 });
    const t = await p.start('r1', start('startof'));
    t.append([1, 2, 3], [-1, -2, -3]);
    await t.flush();
    expect(await p.startOf('startof')).toEqual({ start: expect.objectContaining({ trajectoryId: 'startof', weightVersion: 3 }) as unknown, owner: 'r1' });
    await p.takeOver('startof', 'r2');
    expect((await p.startOf('startof'))?.owner).toBe('r2');
    expect(await p.startOf('nope')).toBeUndefined();
  });

  it('flushes every T ms when fewer than K tokens arrive', async () => {
    const p = await pool({ flushTokens: 1000, flushMs: 50 });
    const t = await p.start('r1', start('slow'));
    t.append([7], [-1]);
    await expect.poll(async () => (await p.read('slow'))?.tokens.length, { timeout: 3000 }).toBe(1);
  });

  it('lists what a rollout owns and hands it over atomically (failover)', async () => {
    const p = await pool();
    const a = await p.start('dead', start('x1'));
    const b = await p.start('dead', start('x2'));
    await p.start('alive', start('x3'));
    a.append(
      range(0, 6),
      range(0, 6).map((i) => -i),
    );
    b.append([9], [-9]);
    await Promise.all([a.flush(), b.flush()]);
    expect((await p.list('dead')).map((s) => [s.trajectoryId, s.tokens]).sort()).toEqual([
      ['x1', 6],
      ['x2', 1],
    ]);
    const taken = await p.takeOverAll('dead', 'rescuer');
    expect(taken.map((r) => r.status)).toEqual(['taken', 'taken']);
    const first = taken.find((r) => r.status === 'taken' && r.state.start.trajectoryId === 'x1');
    expect(first?.status === 'taken' && Array.from(first.state.tokens)).toEqual(range(0, 6));
    expect(await p.list('dead')).toEqual([]);
    expect((await p.list('rescuer')).length).toBe(2);
    // The old owner is fenced: its next append fails and is counted.
    a.append([100], [-1]);
    await expect(a.flush()).rejects.toMatchObject({ code: ErrorCodes.NOT_OWNER });
    expect(() => a.append([101], [-1])).toThrow(expect.objectContaining({ code: ErrorCodes.NOT_OWNER }));
    expect(await metricValue(registry, 'laminar_partial_fenced_total')).toBe(1);
  });

  it('two rollouts taking the same trajectory at once: exactly one wins', async () => {
    const p = await pool();
    const t = await p.start('dead', start('contested'));
    t.append([1, 2, 3, 4], [0, 0, 0, 0]);
    await t.flush();
    const results = await Promise.allSettled([p.takeOver('contested', 'r-a', { from: 'dead' }), p.takeOver('contested', 'r-b', { from: 'dead' })]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const lost = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(lost.reason).toMatchObject({ code: ErrorCodes.NOT_OWNER });
    // The winner continues from where the dead rollout stopped.
    const win = (results.find((r) => r.status === 'fulfilled') as PromiseFulfilledResult<Awaited<ReturnType<PartialPool['takeOver']>>>).value;
    if (win.status !== 'taken') throw new Error('expected taken');
    win.trajectory.append([5, 6, 7, 8], [0, 0, 0, 0]);
    await win.trajectory.flush();
    expect(Array.from((await p.read('contested'))!.tokens)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it('a trajectory id can be started once', async () => {
    const p = await pool();
    await p.start('r1', start('once'));
    await expect(p.start('r2', start('once'))).rejects.toMatchObject({ code: ErrorCodes.TRAJECTORY_EXISTS });
    await expect(p.takeOver('never-started', 'r1')).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_TRAJECTORY });
    const t = await p.start('r1', start('bad-append'));
    expect(() => t.append([1, 2], [0])).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_APPEND }));
  });

  it('completion moves the trajectory to the experience buffer: never both, never neither', async () => {
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: name, registry });
    const p = await pool({ writer });
    const t = await p.start('r1', start('done-1'));
    t.append(
      range(100, 108),
      range(0, 8).map(() => -1),
    );
    const final = trajectory({ id: 'done-1', weightVersion: 3 }, 12);
    await p.complete(t, final);
    expect(await p.read('done-1')).toBeUndefined();
    expect(await writer.has('done-1')).toBe(true);

    // A taken-over trajectory cannot be completed by its old owner: nothing is written.
    const u = await p.start('r1', start('done-2'));
    await u.flush();
    await p.takeOver('done-2', 'r2');
    await expect(p.complete(u, trajectory({ id: 'done-2' }))).rejects.toMatchObject({ code: ErrorCodes.NOT_OWNER });
    expect(await writer.has('done-2')).toBe(false);

    // Crash after the experience write, before the purge: a takeover finishes the removal.
    const v = await p.start('r1', start('done-3'));
    await v.mark('completing');
    await writer.write(trajectory({ id: 'done-3' }));
    expect(await p.takeOver('done-3', 'r2')).toEqual({ status: 'completed' });
    expect(await p.read('done-3')).toBeUndefined();

    const s = await ExperienceSampler.open({ nc: nats.nc, buffer: name, batchSize: 2, registry, prefetch: false });
    closers.push(() => s.close());
    expect((await s.sample({ timeoutMs: 5000 })).items.map((i) => i.id)).toEqual(['done-1', 'done-3']);
  });
  /** How many messages the trajectory's log holds in the stream. */
  async function logLength(p: PartialPool, id: string): Promise<number> {
    const jsm = (p as unknown as { jsm: JetStreamManager }).jsm;
    const info = await jsm.streams.info(p.names.stream, { subjects_filter: p.names.subject(id) });
    return info.state.subjects?.[p.names.subject(id)] ?? 0;
  }

  it('a parked trajectory starts again in its own log in one step: one rollout wins, readers see only the new start', async () => {
    const p = await pool({ flushTokens: 2 });
    const t = await p.start('r1', start('again'));
    t.append([1, 2, 3, 4], [-1, -1, -1, -1]);
    await t.flush();
    const parked = await p.takeOver('again', 'parked');
    if (parked.status === 'taken') parked.trajectory.release();
    const fresh: PartialStart = { ...start('again'), weightVersion: 4 };

    // Only from the holder named.
    await expect(p.restart('r2', fresh, { from: 'someone-else' })).rejects.toMatchObject({ code: ErrorCodes.NOT_OWNER });
    // Two rollouts at once: one restarts it, the other is told it is not its own.
    const results = await Promise.allSettled([p.restart('r2', fresh, { from: 'parked' }), p.restart('r3', fresh, { from: 'parked' })]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect((results.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason).toMatchObject({ code: ErrorCodes.NOT_OWNER });
    const won = (results.find((r) => r.status === 'fulfilled') as PromiseFulfilledResult<Awaited<ReturnType<PartialPool['restart']>>>).value;
    expect(won.tokenCount).toBe(0);
    won.append([7, 8], [-2, -2]);
    await won.flush();

    const s = (await p.read('again'))!;
    expect(Array.from(s.tokens)).toEqual([7, 8]);
    expect(s).toMatchObject({ owner: won.owner, start: { weightVersion: 4 } });
    expect(await p.startOf('again')).toEqual({ start: expect.objectContaining({ weightVersion: 4 }) as unknown, owner: won.owner });
    expect((await p.list()).find((x) => x.trajectoryId === 'again')).toMatchObject({ owner: won.owner, tokens: 2 });
    // The superseded messages are gone: the new start and one delta remain.
    expect(await logLength(p, 'again')).toBe(2);
    expect(await metricValue(registry, 'laminar_partial_restarts_total')).toBe(1);
    // A log that is gone meanwhile is simply started, by one of two rollouts.
    await p.remove('again');
    const anew = await Promise.allSettled([p.restart('r3', fresh, { from: 'parked' }), p.restart('r4', fresh, { from: 'parked' })]);
    const started = anew.filter((r): r is PromiseFulfilledResult<Awaited<ReturnType<PartialPool['restart']>>> => r.status === 'fulfilled');
    expect(started).toHaveLength(1);
    expect((anew.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason).toMatchObject({ code: ErrorCodes.NOT_OWNER });
    expect((await p.startOf('again'))?.owner).toBe(started[0]!.value.owner);
  });

  it('a restart cut off before its clean-up (a crash) leaves old messages that no reader takes for the trajectory', async () => {
    const p = await pool({ flushTokens: 2 });
    const t = await p.start('r1', start('cut'));
    t.append([1, 2, 3, 4, 5, 6], [-1, -1, -1, -1, -1, -1]);
    await t.flush();
    const parked = await p.takeOver('cut', 'parked');
    if (parked.status === 'taken') parked.trajectory.release();
    const jsm = (p as unknown as { jsm: JetStreamManager }).jsm;
    const purge = jsm.streams.purge.bind(jsm.streams);
    jsm.streams.purge = () => Promise.reject(new Error('killed before the purge'));
    const restarted = await p.restart('r2', { ...start('cut'), weightVersion: 5 }, { from: 'parked' }).finally(() => {
      jsm.streams.purge = purge;
    });
    restarted.append([9], [-9]);
    await restarted.flush();
    expect(await logLength(p, 'cut')).toBe(5); // start, delta, takeover, then the new start and its delta
    expect(await p.startOf('cut')).toEqual({ start: expect.objectContaining({ weightVersion: 5 }) as unknown, owner: 'r2' });
    // A takeover (failover of r2) resumes the new generation, not the old one.
    const taken = await p.takeOver('cut', 'r3', { from: 'r2' });
    if (taken.status !== 'taken') throw new Error('expected taken');
    expect(Array.from(taken.state.tokens)).toEqual([9]);
    expect(taken.state.start.weightVersion).toBe(5);
    taken.trajectory.append([10], [-10]);
    await taken.trajectory.flush();
    expect(Array.from((await p.read('cut'))!.tokens)).toEqual([9, 10]);
    expect(await p.startOf('cut')).toEqual({ start: expect.objectContaining({ weightVersion: 5 }) as unknown, owner: 'r3' });
  });

  it('a start whose ack was lost is adopted by its retry, not reported as a clash', async () => {
    const p = await pool();
    const js = (p as unknown as { js: JetStreamClient }).js;
    const publish = js.publish.bind(js);
    let calls = 0;
    js.publish = async (...args: Parameters<JetStreamClient['publish']>) => {
      const first = ++calls === 1;
      const ack = await publish(...args);
      // The first publish is stored, but its ack never arrives: the caller sees a timeout and retries.
      if (first) throw Object.assign(new Error('timeout'), { name: 'TimeoutError' });
      return ack;
    };
    try {
      const t = await p.start('r1', start('lost-ack'));
      expect(calls).toBe(2); // the retry met the stored start and adopted it
      t.append([1, 2, 3, 4], [0, 0, 0, 0]);
      await t.flush();
      expect((await p.read('lost-ack'))!.owner).toBe('r1');
      // Someone else's start of the same id is still a clash.
      await expect(p.start('r2', start('lost-ack'))).rejects.toMatchObject({ code: ErrorCodes.TRAJECTORY_EXISTS });
    } finally {
      js.publish = publish;
    }
  });
});

/**
 * A take-over of a trajectory that is being completed (issue #47, the cluster soak's double
 * writes): its completer has written the 'completing' marker and its record is still on its way
 * (retried through a server restart). Taken over then, its sample would be generated again while
 * its record lands anyway: the trainer would get it twice.
 */
describe('PartialPool take-over of a trajectory being completed', () => {
  it('is refused while the completer can still write: the sample is not generated again', async () => {
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: name, registry });
    const held = heldWriter(writer);
    const a = await pool({ writer: held.writer });
    const b = await pool({ writer });
    const t = await a.start('rA', start('race'));
    t.append([1, 2, 3, 4], [-1, -1, -1, -1]);
    const final: TrajectoryInput = trajectory({ id: 'race', weightVersion: 3 }, 12);
    const completion = a.complete(t, final);
    await held.writing;
    expect((await b.read('race'))?.state).toBe('completing');

    // Rollout B (reconciliation, re-initialisation) or the manager's orphan scan asks now.
    const taking = await b.takeOver('race', 'rB');
    // 'taken' here is the double write: B resumes or parks it and returns its sample.
    expect(taking).toMatchObject({ status: 'completing' });
    if (taking.status !== 'completing') return;
    expect(taking.retryAfterMs).toBeGreaterThan(0);
    expect(taking.retryAfterMs).toBeLessThanOrEqual(45_000);
    // Nothing was written to the log: A still owns it, and its completion finishes.
    expect((await b.read('race'))?.owner).toBe('rA');

    held.release();
    await expect(completion).resolves.toMatchObject({ duplicate: false });
    expect(await writer.has('race')).toBe(true);
    // Asked again later: the trajectory is gone, written once.
    await expect(b.takeOver('race', 'rB')).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_TRAJECTORY });
  });

  it('a completing log whose record is in the buffer is finished, not taken, within the grace', async () => {
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: name, registry });
    const a = await pool({ writer });
    const t = await a.start('rA', start('landed'));
    await t.mark('completing');
    await writer.write(trajectory({ id: 'landed', weightVersion: 3 }));
    expect(await a.takeOver('landed', 'rB')).toEqual({ status: 'completed' });
    expect(await a.read('landed')).toBeUndefined();
  });

  it('after the grace, asks the buffer again, then takes the log over as finished (its response is whole)', async () => {
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: name, registry });
    // A grace of 0: every completing marker is past it (its completer died before writing).
    const b = await pool({ writer, completingGraceMs: 0 });
    const a = await pool({ writer });
    const t = await a.start('rA', start('orphaned-completion'));
    t.append([1, 2, 3, 4, 5], [-1, -1, -1, -1, -1]);
    await t.mark('completing');

    const taking = await b.takeOver('orphaned-completion', 'rB');
    expect(taking).toMatchObject({ status: 'taken', finished: true, state: { owner: 'rB', state: 'takeover' } });
    if (taking.status !== 'taken') return;
    expect(taking.state.tokens.length).toBe(5);
    taking.trajectory.release();

    // A log that is not being completed is taken as before, not finished.
    const u = await a.start('rA', start('plain'));
    await u.flush();
    expect(await b.takeOver('plain', 'rB')).toMatchObject({ status: 'taken', finished: false });
  });

  it('rejects a negative grace', async () => {
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: name, registry });
    await expect(pool({ writer, completingGraceMs: -1 })).rejects.toMatchObject({ code: ErrorCodes.BAD_DATA_OPTIONS });
  });
});
